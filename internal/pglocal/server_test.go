package pglocal_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// relocatedConfig is a cluster under a mode-0700 directory, as in a clone
// under /root: when we are root, Start relocates it under /var/tmp behind a
// symlink, the path `payments dev` takes there.
func relocatedConfig(t *testing.T) pglocal.Config {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "data")
	// Registered before any server's Stop, so it runs after them.
	t.Cleanup(func() {
		if target, err := os.Readlink(dataDir); err == nil {
			os.RemoveAll(filepath.Dir(target))
		}
	})
	return pglocal.Config{DataDir: dataDir, Ephemeral: true, RelocateUnreachable: true}
}

func startWith(t *testing.T, cfg pglocal.Config) *pglocal.Server {
	t.Helper()
	s, err := pglocal.Start(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// logWatch is a slog.Handler that closes seen when a message containing text is logged.
type logWatch struct {
	text string
	once *sync.Once
	seen chan struct{}
}

func watchLog(text string) logWatch {
	return logWatch{text: text, once: new(sync.Once), seen: make(chan struct{})}
}

func (w logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w logWatch) WithGroup(string) slog.Handler            { return w }
func (w logWatch) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, w.text) {
		w.once.Do(func() { close(w.seen) })
	}
	return nil
}

type started struct {
	s   *pglocal.Server
	err error
}

// startWhileWaiting starts a server on cfg in the background and returns once
// that start says it waits for a server of an earlier run. It fails the test
// if the start returns first, without having waited.
func startWhileWaiting(t *testing.T, cfg pglocal.Config) <-chan started {
	t.Helper()
	waiting := watchLog("postgres of an earlier run still works in the data directory")
	cfg.Logger = slog.New(waiting)
	done := make(chan started, 1)
	go func() {
		s, err := pglocal.Start(context.Background(), cfg)
		done <- started{s, err}
	}()
	select {
	case <-waiting.seen:
		return done
	case r := <-done:
		if r.s != nil {
			_ = r.s.Stop()
		}
		t.Fatalf("the start did not wait for the server of the earlier run: it returned %v", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the start neither waited nor returned")
	}
	return nil
}

func await(t *testing.T, done <-chan started) *pglocal.Server {
	t.Helper()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		t.Cleanup(func() { _ = r.s.Stop() })
		return r.s
	case <-time.After(60 * time.Second):
		t.Fatal("the start did not return")
		return nil
	}
}

// A `payments dev` started again at once after a kill finds the killed run's
// server still shutting down. The stopped server here stands for one that
// takes its time: it holds its lock and its shared memory until the new start
// has seen it.
func TestStart_waitsForAServerOfAnEarlierRunToExit(t *testing.T) {
	t.Parallel()
	cfg := relocatedConfig(t)
	first := startWith(t, cfg)
	require.NoError(t, first.CreateDatabase(context.Background(), "kept"))
	require.NoError(t, syscall.Kill(first.PID(), syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(first.PID(), syscall.SIGCONT) })

	done := startWhileWaiting(t, cfg)
	select {
	case <-first.Done():
		t.Fatal("a stopped server cannot exit")
	default:
	}
	// Let it go on: it finds the SIGINT the new start sent it, shuts down fast.
	require.NoError(t, syscall.Kill(first.PID(), syscall.SIGCONT))
	second := await(t, done)

	// The second server could not have started beside the first: the first is
	// gone (its reaping by our Wait may lag a moment behind).
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first server did not exit")
	}
	conn, err := pgx.Connect(context.Background(), second.URL("kept"))
	require.NoError(t, err, "the same cluster, through the symlink")
	require.NoError(t, conn.Close(context.Background()))
}

// A postmaster killed outright leaves its children behind for a moment, and
// each holds the cluster's shared memory. The stopped backend here stands for
// one that takes its time to notice.
func TestStart_waitsForTheChildrenOfAKilledServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := relocatedConfig(t)
	first := startWith(t, cfg)
	conn, err := pgx.Connect(ctx, first.URL("postgres"))
	require.NoError(t, err)
	var backend int
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend))
	require.NoError(t, syscall.Kill(backend, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(backend, syscall.SIGKILL) })
	require.NoError(t, syscall.Kill(first.PID(), syscall.SIGKILL))
	<-first.Done()

	done := startWhileWaiting(t, cfg)
	require.NoError(t, syscall.Kill(backend, syscall.SIGCONT))
	second := await(t, done)

	conn, err = pgx.Connect(ctx, second.URL("postgres"))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
}

// A server of an earlier run that never exits is not robbed of its lock: the
// start fails, and says which process is in the way.
func TestStart_namesTheEarlierServerThatDoesNotExitAndKeepsItsLock(t *testing.T) {
	t.Parallel()
	cfg := relocatedConfig(t)
	first := startWith(t, cfg)
	require.NoError(t, syscall.Kill(first.PID(), syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(first.PID(), syscall.SIGCONT) })

	// The same wait as after earlierServerTimeout, cut short by the context.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := pglocal.Start(ctx, cfg)
	if s != nil {
		_ = s.Stop()
	}
	require.ErrorContains(t, err, "postgres of an earlier run (pid "+strconv.Itoa(first.PID()))
	lock, err := os.ReadFile(filepath.Join(cfg.DataDir, "postmaster.pid"))
	require.NoError(t, err, "the live server's lock is still there")
	require.True(t, strings.HasPrefix(string(lock), strconv.Itoa(first.PID())+"\n"), "and still its own: %q", lock)
	require.True(t, alive(first.PID()))
}
