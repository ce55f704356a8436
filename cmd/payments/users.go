package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/users"
)

// runUsers is `payments users create --email E`. The database is found as
// `payments keys` finds it: DATABASE_URL, else the cluster of `payments
// dev` in --data-dir (keysDatabase).
func runUsers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return fmt.Errorf("%w: give create: payments users create --email E", errUsage)
	}
	var cfg config
	var email string
	f := newFlags("users create", stderr)
	f.stringVar(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL (empty: the cluster in --data-dir)")
	f.stringVar(&cfg.DataDir, "data-dir", "PAYMENTS_DATA_DIR", ".data", "where payments dev keeps its PostgreSQL cluster")
	f.levelVar(&cfg.LogLevel, "log-level", "PAYMENTS_LOG_LEVEL", slog.LevelWarn, "debug, info, warn or error")
	f.StringVar(&email, "email", "", "the new user's email address")
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	if email = strings.TrimSpace(email); email == "" || !strings.Contains(email, "@") {
		return fmt.Errorf("%w: users create needs --email with an email address, e.g. --email ada@example.com", errUsage)
	}
	dbURL, stopDB, err := keysDatabase(ctx, cfg, newLogger(stderr, cfg.LogLevel))
	if err != nil {
		return err
	}
	defer stopDB()
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	u, key, err := users.CreateUser(ctx, pool, email)
	if err != nil {
		return err
	}
	// The key alone on stdout, so scripts can capture it; the note on stderr.
	fmt.Fprintf(stderr, "Created user %d (%s). Its API key follows; it is shown only this once:\n", u.ID, u.Email)
	fmt.Fprintln(stdout, key)
	return nil
}
