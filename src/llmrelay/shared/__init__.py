"""State the replicas share (stored responses' homes, conversation bindings): Redis, or the
main database (PostgreSQL) when Redis is absent or down. May import store/ and routing/."""
