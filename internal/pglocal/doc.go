// Package pglocal runs a PostgreSQL server from the machine's own server
// binaries, for `payments dev` and for tests.
//
// It owns the server process and nothing inside the database: it finds the
// binaries (PATH, then Debian's /usr/lib/postgresql/<version>/bin), creates a
// cluster with initdb when the data directory is empty, starts `postgres`
// directly (no pg_ctl, so the server is our child), waits until it accepts
// connections, and stops it with a fast shutdown.
//
// Three promises make it safe to use on a developer's machine:
//
//   - It listens on a unix socket only (listen_addresses is empty), so nothing
//     outside this machine can reach it.
//   - When the parent process dies, even by SIGKILL, the kernel sends the server
//     SIGINT (a parent-death signal), which is PostgreSQL's fast shutdown: no
//     server lingers after us.
//   - A start right after a crash waits for the crashed run's server, still
//     shutting down, and all its processes to exit (a server of an earlier
//     run somehow still running on the cluster is shut down first); the
//     cluster is known by its real directory, also when DataDir is a
//     symlink. Only then is a postmaster.pid left behind removed, so a live
//     server's lock is never taken away, and one whose PID now belongs to
//     another process does not stop the start.
//
// PostgreSQL refuses to run as root. When we are root, initdb and postgres run
// as the unprivileged "postgres" OS user, which owns the cluster directory.
//
// The package never migrates or seeds anything: see package db and pgtest.
package pglocal
