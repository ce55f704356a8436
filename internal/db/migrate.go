package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/example/payments/migrations"
)

// MigrationStatus is where the schema stands.
type MigrationStatus struct {
	Version uint // 0 when no migration has run
	Dirty   bool // a migration failed halfway and needs a hand
}

// MigrateUp applies every migration not yet applied: the project's, then
// River's (the job queue lives in the same database, so a job can be
// inserted in the transaction of the change it announces).
func MigrateUp(ctx context.Context, url string, log *slog.Logger) error {
	err := withMigrator(url, log, func(m *migrate.Migrate) error {
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return migrateRiverUp(ctx, url, log)
}

// migrateRiverUp applies River's own migrations with its migrator.
func migrateRiverUp(ctx context.Context, url string, log *slog.Logger) error {
	pool, err := Open(ctx, url, PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrating River's tables: %w", err)
	}
	if log != nil {
		for _, v := range res.Versions {
			log.Info(fmt.Sprintf("river %d/u %s", v.Version, v.Name), slog.String("component", "migrate"))
		}
	}
	return nil
}

// MigrateDown reverts the project's last applied migration (one step, never
// all: dropping every table by accident is not a thing a command should make
// easy). River's tables are left alone.
func MigrateDown(url string, log *slog.Logger) error {
	return withMigrator(url, log, func(m *migrate.Migrate) error {
		return m.Steps(-1)
	})
}

// MigrationVersion reports the schema's current version.
func MigrationVersion(url string) (MigrationStatus, error) {
	var st MigrationStatus
	err := withMigrator(url, nil, func(m *migrate.Migrate) error {
		v, dirty, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		st = MigrationStatus{Version: v, Dirty: dirty}
		return err
	})
	return st, err
}

func withMigrator(url string, log *slog.Logger, run func(*migrate.Migrate) error) error {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("reading embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, pgx5URL(url))
	if err != nil {
		return fmt.Errorf("opening migrator: %w", err)
	}
	defer m.Close()
	if log != nil {
		m.Log = migrateLogger{log}
	}
	if err := run(m); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	return nil
}

// pgx5URL gives golang-migrate's pgx/v5 driver the scheme it registers under.
func pgx5URL(url string) string {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		if strings.HasPrefix(url, scheme) {
			return "pgx5://" + strings.TrimPrefix(url, scheme)
		}
	}
	return url
}

type migrateLogger struct{ log *slog.Logger }

func (l migrateLogger) Printf(format string, v ...any) {
	l.log.Info(strings.TrimSpace(fmt.Sprintf(format, v...)), slog.String("component", "migrate"))
}
func (l migrateLogger) Verbose() bool { return false }
