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

-- migration 2: staging operations
-- A copy of a tree into or out of a job namespace. `state` is queued, running, done, failed or
-- cancelled; a gateway that starts resumes the queued and running ones.
CREATE TABLE stage_ops (
  id            TEXT PRIMARY KEY,
  job_id        TEXT NOT NULL,
  direction     TEXT NOT NULL,             -- "in" or "out"
  source        TEXT NOT NULL,
  destination   TEXT NOT NULL,
  verify        INTEGER NOT NULL,
  destroy_after INTEGER NOT NULL DEFAULT 0,  -- destroy the namespace once the copy is done
  state         TEXT NOT NULL,
  walked        INTEGER NOT NULL DEFAULT 0,  -- the source tree is in stage_entries
  bytes_total   INTEGER NOT NULL DEFAULT 0,
  files_total   INTEGER NOT NULL DEFAULT 0,
  bytes_done    INTEGER NOT NULL DEFAULT 0,
  files_done    INTEGER NOT NULL DEFAULT 0,
  error         TEXT NOT NULL DEFAULT '',
  failed        TEXT NOT NULL DEFAULT '',  -- "path: reason" lines
  started_s     INTEGER NOT NULL,
  updated_s     INTEGER NOT NULL,
  finished_s    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX stage_ops_by_job ON stage_ops(job_id);
-- The source tree of an operation as walked: what to copy. A large file's chunks are recorded as
-- each is written, so that a resumed copy writes only the rest.
CREATE TABLE stage_entries (
  op_id         TEXT NOT NULL REFERENCES stage_ops(id) ON DELETE CASCADE,
  path          TEXT NOT NULL,             -- relative to the source root; "" is the root
  kind          TEXT NOT NULL,             -- "dir", "file" or "symlink"
  size          INTEGER NOT NULL,
  mode          INTEGER NOT NULL,
  mtime         INTEGER NOT NULL,
  target        TEXT NOT NULL DEFAULT '',  -- a symlink's
  done          INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (op_id, path)
);
CREATE TABLE stage_chunks (
  op_id         TEXT NOT NULL,
  path          TEXT NOT NULL,
  chunk         INTEGER NOT NULL,          -- index of a chunk written at the destination
  PRIMARY KEY (op_id, path, chunk),
  FOREIGN KEY (op_id, path) REFERENCES stage_entries(op_id, path) ON DELETE CASCADE
);

-- migration 3: the database's identity
-- Written once, at random, when the database is made (or first opened by a gateway that has
-- this migration). The root of each backend of a [[jobs.pool]] names it in `.skein-pool`
-- (gateway/jobs/pool_claim.hpp): a gateway with another database makes no job directory there
-- and reaps none, since they are not its own.
CREATE TABLE identity (
  id            TEXT NOT NULL               -- 32 hex digits
);
INSERT INTO identity (id) VALUES (lower(hex(randomblob(16))));
