"""Background workers a server process runs beside the HTTP app."""
