"""The mail outbox as the admin API shows it: what was mailed, to whom, and whether it went
(never a body: bodies are sealed and carry sign-in links). May import store, mail.outbox."""
