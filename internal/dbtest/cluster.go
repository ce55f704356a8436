package dbtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/pglocal"
)

// Cluster is a PostgreSQL cluster of one test's own, for the tests that do
// to a server what no other test may see: stop it, change its settings
// (ALTER SYSTEM), end its sessions. Unlike the shared cluster, its commits
// are synchronous (synchronous_commit on), so a synchronous standby that is
// named but absent makes them wait, as on a primary cut off from its
// standby. It holds one migrated database, DBName.
type Cluster struct {
	t       testing.TB
	dataDir string
	server  *pglocal.Server
}

// DBName is the migrated database of a Cluster.
const DBName = "payments"

// NewCluster starts a cluster of t's own (initdb, start, migrate: a few
// seconds), stopped and removed when t ends.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	// Short and world-traversable, as the shared cluster's (startServer).
	dir, err := os.MkdirTemp("", "pgown-")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	c := &Cluster{t: t, dataDir: filepath.Join(dir, "data")}
	t.Cleanup(func() {
		if c.server != nil {
			_ = c.server.Stop()
		}
		_ = os.RemoveAll(dir)
	})
	c.Start()
	ctx := context.Background()
	if err := c.server.CreateDatabase(ctx, DBName); err != nil {
		t.Fatalf("dbtest: creating database: %v", err)
	}
	if err := db.MigrateUp(ctx, c.URL(), nil); err != nil {
		t.Fatalf("dbtest: migrating: %v", err)
	}
	return c
}

// Start starts the cluster's server (again, after Stop), on the same
// socket: URL stays valid.
func (c *Cluster) Start() {
	c.t.Helper()
	s, err := pglocal.Start(context.Background(), pglocal.Config{
		DataDir:   c.dataDir,
		Ephemeral: true,
		Settings:  map[string]string{"synchronous_commit": "on", "max_connections": "100"},
	})
	if err != nil {
		c.t.Fatalf("dbtest: starting an own cluster: %v", err)
	}
	c.server = s
}

// Stop stops the server (a fast shutdown: its sessions end with 57P01).
func (c *Cluster) Stop() {
	c.t.Helper()
	if err := c.server.Stop(); err != nil {
		c.t.Fatalf("dbtest: stopping the own cluster: %v", err)
	}
}

// URL is the connection URL of the cluster's migrated database.
func (c *Cluster) URL() string { return c.server.URL(DBName) }

// Exec runs sql on the cluster's maintenance database, as its superuser
// (ALTER SYSTEM cannot run in a transaction: it is sent alone).
func (c *Cluster) Exec(sql string) {
	c.t.Helper()
	conn, err := db.Open(context.Background(), c.server.URL("postgres"), db.PoolConfig{MaxConns: 1})
	if err != nil {
		c.t.Fatalf("dbtest: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		c.t.Fatalf("dbtest: %s: %v", sql, err)
	}
}

// SetSynchronousStandbys sets synchronous_standby_names and reloads the
// configuration: naming a standby that does not exist makes every commit
// that wrote something wait (forever); "" lets them go, the waiting ones
// included.
func (c *Cluster) SetSynchronousStandbys(names string) {
	c.t.Helper()
	c.Exec("ALTER SYSTEM SET synchronous_standby_names = '" + names + "'")
	c.Exec("SELECT pg_reload_conf()")
}
