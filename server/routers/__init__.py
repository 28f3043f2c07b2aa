"""One FastAPI router per resource; handlers parse, call a service and return a schema."""
