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
//   - A postmaster.pid left behind by a server that is gone does not stop the
//     next start; a server of ours that is somehow still running on the same
//     data directory is shut down first.
//
// PostgreSQL refuses to run as root. When we are root, initdb and postgres run
// as the unprivileged "postgres" OS user, which owns the cluster directory.
//
// The package never migrates or seeds anything: see package db and pgtest.
package pglocal
