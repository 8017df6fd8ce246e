-- The gateway's durable state: job namespaces, their credentials' digests, their usage, what is
-- still to remove on the backends, and staging operations. Applied by gateway/jobs/sqlite.cpp:
-- each "-- migration N" section once, in order, in a transaction; PRAGMA user_version holds the
-- last applied. Never edit a migration that has shipped: add the next one.

-- migration 1: job namespaces
CREATE TABLE job_namespaces (
  name          TEXT PRIMARY KEY,          -- "job-<job_id>"
  job_id        TEXT NOT NULL UNIQUE,
  uid           INTEGER NOT NULL,
  gid           INTEGER NOT NULL,
  layout_kind   TEXT NOT NULL,             -- "striped" or "union"
  stripe_size   INTEGER NOT NULL,
  pool          TEXT NOT NULL,
  backends      TEXT NOT NULL,             -- names, comma-separated, in stripe order
  quota_bytes   INTEGER NOT NULL,
  quota_inodes  INTEGER NOT NULL,
  created_s     INTEGER NOT NULL,
  expires_s     INTEGER NOT NULL,
  labels        TEXT NOT NULL DEFAULT '',  -- "key=value" lines
  bytes_used    INTEGER NOT NULL DEFAULT 0,
  inodes_used   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE credentials (
  namespace     TEXT NOT NULL REFERENCES job_namespaces(name) ON DELETE CASCADE,
  digest        TEXT NOT NULL,             -- SHA-256 of the token, hex
  issued_to     TEXT NOT NULL,             -- "create", or the node certificate's name
  issued_s      INTEGER NOT NULL,
  PRIMARY KEY (namespace, digest)
);
-- A job's directory on a backend, to remove: recorded before a destroy starts removing, deleted
-- once it is gone, kept (and retried) while the backend is down.
CREATE TABLE pending_removals (
  backend       TEXT NOT NULL,
  path          TEXT NOT NULL,             -- relative to the backend's root
  namespace     TEXT NOT NULL,
  since_s       INTEGER NOT NULL,
  attempts      INTEGER NOT NULL DEFAULT 0,
  last_error    TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (backend, path)
);
-- A directory on a pool's backend that belongs to no job namespace: reaped once it has been seen
-- for the grace period.
CREATE TABLE orphans (
  backend       TEXT NOT NULL,
  path          TEXT NOT NULL,
  first_seen_s  INTEGER NOT NULL,
  PRIMARY KEY (backend, path)
);
