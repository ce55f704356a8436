package pglocal_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/pglocal"
)

// tempDir is like t.TempDir but reachable by the postgres OS user (t.TempDir
// is mode 0700, owned by us) and short enough for a unix socket path.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pglocal-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func start(t *testing.T, dataDir string) *pglocal.Server {
	t.Helper()
	s, err := pglocal.Start(context.Background(), pglocal.Config{DataDir: dataDir, Ephemeral: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestStart_reusesTheClusterAndStopsCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := filepath.Join(tempDir(t), "data")

	s := start(t, dataDir)
	require.NoError(t, s.CreateDatabase(ctx, "app"))
	require.NoError(t, s.CreateDatabase(ctx, "app"), "creating an existing database is a no-op")
	conn, err := pgx.Connect(ctx, s.URL("app"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	pid := s.PID()
	require.NoError(t, s.Stop())
	require.False(t, alive(pid), "postgres must be gone after Stop")
	require.NoFileExists(t, filepath.Join(dataDir, "postmaster.pid"))

	s = start(t, dataDir)
	conn, err = pgx.Connect(ctx, s.URL("app"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v string
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	require.Equal(t, "still here", v)
}

func TestStart_listensOnItsUnixSocketOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, filepath.Join(tempDir(t), "data"))
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var listen string
	require.NoError(t, conn.QueryRow(ctx, "SHOW listen_addresses").Scan(&listen))
	require.Empty(t, listen, "no TCP listener")
}

func TestStart_ignoresAStaleLockWhosePIDWasReused(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(tempDir(t), "data")
	s := start(t, dataDir)
	require.NoError(t, s.Stop())

	// A crash leaves postmaster.pid behind; by the next start its PID may
	// belong to some other live process, here this test binary.
	stale := strconv.Itoa(os.Getpid()) + "\n" + dataDir + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "postmaster.pid"), []byte(stale), 0o600))

	s = start(t, dataDir)
	require.True(t, alive(s.PID()))
}

func TestStart_shutsDownAServerLeftRunningOnTheDataDir(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(tempDir(t), "data")
	first := start(t, dataDir)

	second := start(t, dataDir)
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first server should have been shut down by the second start")
	}
	require.True(t, alive(second.PID()))
}

func TestFindBinDir_namesThePackageToInstall(t *testing.T) {
	t.Setenv("PAYMENTS_PG_BINDIR", t.TempDir())
	_, err := pglocal.FindBinDir()
	require.ErrorIs(t, err, pglocal.ErrNoServerBinaries)
	require.Contains(t, err.Error(), "apt-get install postgresql")
}

func TestStart_explainsADataDirThePostgresUserCannotReach(t *testing.T) {
	t.Parallel()
	private := t.TempDir() // mode 0700, owned by us
	s, err := pglocal.Start(context.Background(), pglocal.Config{DataDir: filepath.Join(private, "data"), Ephemeral: true})
	if os.Geteuid() != 0 {
		// Not root: the server runs as us, so our own directory is fine.
		require.NoError(t, err)
		require.NoError(t, s.Stop())
		return
	}
	require.ErrorContains(t, err, "not reachable by the \"postgres\" OS user")
	require.ErrorContains(t, err, private)
}

func TestStart_relocatesAnUnreachableDataDirBehindASymlink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "data") // under a mode-0700 directory
	cfg := pglocal.Config{DataDir: dataDir, Ephemeral: true, RelocateUnreachable: true}

	s, err := pglocal.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	if os.Geteuid() == 0 {
		target, err := os.Readlink(dataDir)
		require.NoError(t, err, "the data dir is a symlink to where the cluster lives")
		t.Cleanup(func() {
			_ = s.Stop()
			os.RemoveAll(filepath.Dir(target))
		})
	}
	require.NoError(t, s.CreateDatabase(ctx, "kept"))
	require.NoError(t, s.Stop())

	// The next start finds the same cluster through the symlink.
	s, err = pglocal.Start(ctx, cfg)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, s.URL("kept"))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
}
