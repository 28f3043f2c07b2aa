"""The WDBC diagnostic classification benchmark."""
