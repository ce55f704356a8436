package pglocal

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config says where the cluster lives and how it runs.
type Config struct {
	// DataDir holds the cluster. An empty or missing directory is initialised
	// with initdb; an existing cluster is reused as it is.
	DataDir string
	// Ephemeral trades durability for speed, for throwaway test clusters:
	// initdb --no-sync, and fsync, synchronous_commit and full_page_writes off.
	Ephemeral bool
	// Settings are extra server settings passed as `-c name=value`.
	Settings map[string]string
	// LogFile receives the server's output; default DataDir + ".log".
	LogFile string
	// RelocateUnreachable lets a cluster that the postgres OS user could not
	// reach at DataDir (we are root and DataDir is under a mode-0700
	// directory) live under /var/tmp instead, with DataDir a symlink to it.
	// Without it, such a DataDir is an error that says how to fix it.
	RelocateUnreachable bool
	// Logger reports what the package does; nil discards.
	Logger *slog.Logger
}

// Server is a running PostgreSQL server that this process started and owns.
type Server struct {
	cfg       Config
	socketDir string
	user      serverUser
	cmd       *exec.Cmd
	logFile   *os.File
	exited    chan struct{} // closed when the server process has exited
	waitErr   error         // set before exited is closed
}

const (
	// port only names the socket file (.s.PGSQL.5432): nothing listens on TCP.
	port = 5432
	// maxSocketPath keeps the socket path inside the kernel's 108-byte sun_path.
	maxSocketPath = 100
	readyTimeout  = 60 * time.Second
	stopTimeout   = 30 * time.Second
)

// Start initialises the cluster if needed, waits for a server of an earlier
// run on the same cluster to exit, clears the stale locks it left, starts
// postgres and waits until it accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.LogFile == "" {
		cfg.LogFile = dataDir + ".log"
	}
	binDir, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	u, err := currentServerUser()
	if err != nil {
		return nil, err
	}
	if cfg.DataDir, err = u.resolveDataDir(dataDir, cfg.RelocateUnreachable, cfg.Logger); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, user: u, exited: make(chan struct{})}
	if err := s.prepareDataDir(ctx, binDir); err != nil {
		return nil, err
	}
	if err := s.prepareSocketDir(); err != nil {
		return nil, err
	}
	// The resolved directory, not dataDir: a server of an earlier run is
	// known by where it really works, and a relocated cluster's DataDir is a
	// symlink.
	if err := clearStaleLocks(ctx, cfg.Logger, s.cfg.DataDir, s.socketDir); err != nil {
		return nil, err
	}
	if err := s.start(binDir); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	cfg.Logger.Info("postgres started", slog.String("data_dir", dataDir), slog.String("socket_dir", s.socketDir),
		slog.Int("pid", s.cmd.Process.Pid))
	return s, nil
}

// URL returns a connection URL for database dbname over the server's unix socket.
func (s *Server) URL(dbname string) string {
	q := url.Values{"host": {s.socketDir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// PID is the postmaster's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Done is closed when the server process has exited, for whatever reason.
func (s *Server) Done() <-chan struct{} { return s.exited }

// CreateDatabase creates database name unless it already exists.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// Stop asks for a fast shutdown (SIGINT: sessions end, a checkpoint is
// written) and escalates to an immediate one (SIGQUIT), then SIGKILL, if the
// server does not exit in time. Stopping a stopped server is a no-op.
func (s *Server) Stop() error {
	defer s.logFile.Close()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
		select {
		case <-s.exited:
			return nil
		default:
		}
		_ = s.cmd.Process.Signal(sig)
		select {
		case <-s.exited:
			s.cfg.Logger.Info("postgres stopped", slog.String("data_dir", s.cfg.DataDir), slog.String("signal", sig.String()))
			return nil
		case <-time.After(stopTimeout):
		}
	}
	return fmt.Errorf("postgres (pid %d) did not exit", s.cmd.Process.Pid)
}

func (s *Server) prepareDataDir(ctx context.Context, binDir string) error {
	if err := s.user.ensureOwnedDir(s.cfg.DataDir); err != nil {
		return fmt.Errorf("preparing data directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(s.cfg.DataDir, "PG_VERSION")); err == nil {
		return nil
	}
	args := []string{"-D", s.cfg.DataDir, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"}
	if s.cfg.Ephemeral {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), args...)
	cmd.Dir = s.cfg.DataDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.user.credential}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", s.cfg.DataDir, err, out)
	}
	s.cfg.Logger.Info("postgres cluster created", slog.String("data_dir", s.cfg.DataDir))
	return nil
}

// prepareSocketDir puts the socket in the data directory when the path is
// short enough, else in a directory under the system's temp dir named after it.
func (s *Server) prepareSocketDir() error {
	s.socketDir = socketDirFor(s.cfg.DataDir)
	if s.socketDir == s.cfg.DataDir {
		return nil
	}
	return s.user.ensureOwnedDir(s.socketDir)
}

// socketDirFor is where the server of the cluster in dataDir (symlinks
// resolved) puts its socket.
func socketDirFor(dataDir string) string {
	if len(dataDir)+len("/.s.PGSQL.5432") <= maxSocketPath {
		return dataDir
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("pglocal-%x", fnv32(dataDir)))
}

// Running returns the connection URL of database dbname on a server that
// another process (payments dev) runs on the cluster in dataDir, and
// whether there is one that accepts connections. It starts nothing and
// stops nothing: a caller that finds none may Start one, which would shut
// down a server it found.
func Running(ctx context.Context, dataDir, dbname string) (string, bool) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", false
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved // a relocated cluster (Config.RelocateUnreachable)
	}
	s := &Server{socketDir: socketDirFor(abs)}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The maintenance database, which every server has: a server without
	// dbname is running all the same.
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", false
	}
	_ = conn.Close(ctx)
	return s.URL(dbname), true
}

func (s *Server) start(binDir string) error {
	logFile, err := os.OpenFile(s.cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening postgres log: %w", err)
	}
	s.logFile = logFile
	s.cmd = exec.Command(filepath.Join(binDir, "postgres"), s.serverArgs()...)
	s.cmd.Dir = s.cfg.DataDir
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: s.user.credential,
		// Our own process group, so a Ctrl-C in the terminal reaches only us and
		// we can drain requests before we stop the database.
		Setpgid: true,
		// If we die, even by SIGKILL, the kernel tells the postmaster to do a fast shutdown.
		Pdeathsig: syscall.SIGINT,
	}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the *thread* that started the child
		// exits (go.dev/issue/27505), so the thread stays locked to this goroutine
		// for the server's whole life.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		logFile.Close()
		return fmt.Errorf("starting postgres: %w", err)
	}
	return nil
}

func (s *Server) serverArgs() []string {
	settings := map[string]string{
		"listen_addresses":        "",
		"unix_socket_directories": s.socketDir,
		"port":                    strconv.Itoa(port),
	}
	if s.cfg.Ephemeral {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range s.cfg.Settings {
		settings[k] = v
	}
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	args := []string{"-D", s.cfg.DataDir}
	for _, k := range names {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// waitReady polls until a connection succeeds, the server exits, or time runs out.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited during start-up (%v); its log %s ends with:\n%s", s.waitErr, s.cfg.LogFile, logTail(s.cfg.LogFile))
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections in time: %w; last error: %v; its log %s ends with:\n%s",
				ctx.Err(), err, s.cfg.LogFile, logTail(s.cfg.LogFile))
		case <-tick.C:
		}
	}
}

func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	const tail = 2048
	if info, err := f.Stat(); err == nil && info.Size() > tail {
		_, _ = f.Seek(-tail, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}
