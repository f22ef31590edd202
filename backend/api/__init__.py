"""REST API v1 routers."""
