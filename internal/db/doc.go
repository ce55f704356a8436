// Package db owns the connection to PostgreSQL: the pool, the schema
// migrations, the one transaction helper (WithTx, whose Tx pipelines
// statements: see Tx), and the translation of PostgreSQL errors into
// sentinels (errors.go: the only place above the driver that reads a
// SQLSTATE). Queries live in queries/*.sql and are compiled by sqlc into
// package dbsqlc, whose methods take a DBTX so the same query runs on the
// pool or inside a caller's transaction.
//
// It never knows what a payment is: it stores what it is told.
package db
