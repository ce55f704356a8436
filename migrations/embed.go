// Package migrations holds the database schema as golang-migrate SQL files,
// embedded into the binary so `payments migrate` and `payments dev` need no
// files on disk. Files are numbered up/down pairs and are never edited once
// they have landed: a change is a new pair.
package migrations

import "embed"

// FS holds every *.sql migration.
//
//go:embed *.sql
var FS embed.FS
