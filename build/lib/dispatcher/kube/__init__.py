"""The only code that talks to API servers: clients, resources, watches, work queue."""
