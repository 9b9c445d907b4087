"""/api/admin/catalogue: the bundled model catalogue (metering/catalogue.yaml), read-only."""
