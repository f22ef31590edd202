"""An example SLAQ trainer plugin."""
