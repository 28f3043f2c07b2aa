"""The plug-ins under tests/plugins are installed into their own environments by the tests that
use them (tests/integration/test_third_party_plugin*.py); their own tests run there, not here."""

collect_ignore_glob = ["*/tests/*"]
