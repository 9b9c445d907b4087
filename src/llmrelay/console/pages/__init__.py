"""The console's pages, one module per group; each module's `routes(console)` lists them."""
