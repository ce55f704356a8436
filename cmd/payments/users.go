package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/users"
)

// runUsers is `payments users create --email E`.
func runUsers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return fmt.Errorf("%w: payments users create --email E", errUsage)
	}
	var cfg config
	var email string
	f := newFlags("users create", stderr)
	f.stringVar(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection URL")
	f.StringVar(&email, "email", "", "the new user's email address")
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	if email = strings.TrimSpace(email); email == "" || !strings.Contains(email, "@") {
		return fmt.Errorf("%w: users create needs --email with an email address", errUsage)
	}
	if cfg.DatabaseURL == "" {
		return fmt.Errorf("%w: users create needs DATABASE_URL (or --database-url)", errUsage)
	}
	pool, err := db.Open(ctx, cfg.DatabaseURL, db.PoolConfig{MaxConns: 2})
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
