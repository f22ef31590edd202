"""Plain service functions used by the API, the CLI and tests."""
