"""The admin API (`/api/admin/*`): FastAPI routers over the store. The data plane never
imports it; it reads and writes the database, never a provider."""
