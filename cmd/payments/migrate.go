package main

import (
	"context"
	"fmt"
	"io"

	"github.com/example/payments/internal/db"
)

// runMigrate is `payments migrate up|down|version`.
func runMigrate(args []string, stdout, stderr io.Writer) error {
	var cfg config
	f := newFlags("migrate", stderr)
	f.stringVar(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL")
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.NArg() != 1 {
		return fmt.Errorf("%w: payments migrate up|down|version", errUsage)
	}
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("%w: migrate needs DATABASE_URL (or --database-url)", errUsage)
	}
	log := newLogger(stderr, 0)
	switch f.Arg(0) {
	case "up":
		return db.MigrateUp(context.Background(), cfg.DatabaseURL, log)
	case "down":
		return db.MigrateDown(cfg.DatabaseURL, log)
	case "version":
		st, err := db.MigrationVersion(cfg.DatabaseURL)
		if err != nil {
			return err
		}
		dirty := ""
		if st.Dirty {
			dirty = " (dirty: a migration failed halfway; fix it by hand, then force the version)"
		}
		fmt.Fprintf(stdout, "%d%s\n", st.Version, dirty)
		return nil
	default:
		return fmt.Errorf("%w: unknown migrate command %q (up, down or version)", errUsage, f.Arg(0))
	}
}
