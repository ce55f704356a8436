package pglocal

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// An earlier run's server can still be on the data directory when we start.
// After `payments dev` is killed, its postmaster gets the parent-death SIGINT
// and begins a fast shutdown: it ends the sessions, writes a shutdown
// checkpoint, waits for its children and only then exits, which takes a
// moment, longer under load. A run started again at once (by systemd, by a
// test) must wait for all of those processes: each holds the cluster's shared
// memory, and PostgreSQL refuses to start beside them ("pre-existing shared
// memory block ... is still in use"). Only once they are gone are the lock
// files they leave behind stale.
const (
	// earlierFastShutdown is how long a server of an earlier run gets for a
	// fast shutdown before it is asked for an immediate one (SIGQUIT).
	earlierFastShutdown = 30 * time.Second
	// earlierServerTimeout bounds the whole wait; after it Start fails and
	// names the processes that are still there.
	earlierServerTimeout = 45 * time.Second
	pollInterval         = 50 * time.Millisecond
)

// clearStaleLocks waits for any server of an earlier run on dataDir, which
// must be the real cluster directory (symlinks resolved), to exit, then
// removes the lock files a server that is gone left behind.
//
// PostgreSQL writes postmaster.pid in the data directory and a .lock file next
// to its socket. After a crash they stay behind; PostgreSQL removes them itself
// only when their PID is not alive, so a PID since reused by another process
// (common in containers) would block the start forever. Once no postgres
// process works in dataDir, no live server holds these locks, whatever process
// their PID names now.
func clearStaleLocks(ctx context.Context, log *slog.Logger, dataDir, socketDir string) error {
	if err := waitForEarlierServer(ctx, log, dataDir); err != nil {
		return err
	}
	locks := []string{
		filepath.Join(dataDir, "postmaster.pid"),
		filepath.Join(socketDir, fmt.Sprintf(".s.PGSQL.%d.lock", port)),
	}
	for _, lock := range locks {
		pid, ok := lockPID(lock)
		if !ok {
			continue
		}
		if err := os.Remove(lock); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing stale lock file: %w", err)
		}
		log.Info("removed stale postgres lock file", slog.String("file", lock), slog.Int("pid", pid))
	}
	return nil
}

// waitForEarlierServer returns once no postgres process works in dataDir.
// It asks such a server for a fast shutdown (SIGINT), then for an immediate
// one (SIGQUIT), and fails, naming the processes, if they outlast
// earlierServerTimeout or ctx.
//
// The signals go to the processes whose parent is not one of them: the
// postmaster, which stops its children itself, or, when the postmaster is
// already gone (killed), its orphaned children, which nobody else will stop.
// A postmaster whose parent died already got SIGINT; a second one changes
// nothing.
func waitForEarlierServer(ctx context.Context, log *slog.Logger, dataDir string) error {
	procs, err := serverProcesses(dataDir)
	if err != nil || len(procs) == 0 {
		return err
	}
	log.Warn("postgres of an earlier run still works in the data directory; shutting it down and waiting for it to exit",
		slog.String("data_dir", dataDir), slog.String("pids", pids(procs)))
	start := time.Now()
	signalLeaders(procs, syscall.SIGINT)
	escalated := false
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres of an earlier run (pid %s) on %s to exit: %w", pids(procs), dataDir, ctx.Err())
		case <-tick.C:
		}
		if procs, err = serverProcesses(dataDir); err != nil {
			return err
		}
		waited := time.Since(start)
		switch {
		case len(procs) == 0:
			log.Info("postgres of the earlier run exited", slog.Duration("waited", waited))
			return nil
		case waited > earlierServerTimeout:
			return fmt.Errorf("postgres of an earlier run (pid %s) is still running on %s after %v; "+
				"stop it (kill -QUIT %s) and start again", pids(procs), dataDir, earlierServerTimeout.Round(time.Second), pids(procs))
		case waited > earlierFastShutdown && !escalated:
			log.Warn("postgres of an earlier run ignores a fast shutdown; asking for an immediate one",
				slog.String("pids", pids(procs)))
			signalLeaders(procs, syscall.SIGQUIT)
			escalated = true
		}
	}
}

// serverProcess is a process of a postgres server.
type serverProcess struct{ pid, ppid int }

// serverProcesses lists the postgres processes working in dataDir.
//
// The postmaster changes into its data directory at start-up and every
// process it forks (backends, checkpointer, ...) inherits that, so the
// working directory finds them all: whatever path the server was given (a
// symlink, a relative -D), and after the postmaster is gone. A PID reused by
// another program is not a postgres there, and a zombie has no working
// directory. We can read /proc of every process that could be such a server:
// PostgreSQL runs only in a directory its own user owns, and that is us or,
// when we are root, anybody.
func serverProcesses(dataDir string) ([]serverProcess, error) {
	dir, err := os.Stat(dataDir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []serverProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isServerIn(pid, dir) {
			continue
		}
		procs = append(procs, serverProcess{pid: pid, ppid: parentPID(pid)})
	}
	return procs, nil
}

// isServerIn tells whether pid runs the postgres binary with dir as its
// working directory.
func isServerIn(pid int, dir os.FileInfo) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	// " (deleted)": the binary was replaced by a package upgrade since it started.
	if err != nil || filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "postgres" {
		return false
	}
	cwd, err := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid))
	return err == nil && os.SameFile(cwd, dir)
}

// parentPID reads the fourth field of /proc/<pid>/stat; 0 when it cannot.
func parentPID(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The second field, the command name in parentheses, may hold spaces.
	_, rest, _ := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest) // state, ppid, ...
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

func signalLeaders(procs []serverProcess, sig syscall.Signal) {
	for _, p := range procs {
		if !slices.ContainsFunc(procs, func(q serverProcess) bool { return q.pid == p.ppid }) {
			_ = syscall.Kill(p.pid, sig) // it fails only when p exited meanwhile, which is what we want
		}
	}
}

// pids lists the processes' PIDs as kill(1) takes them.
func pids(procs []serverProcess) string {
	s := make([]string, len(procs))
	for i, p := range procs {
		s[i] = strconv.Itoa(p.pid)
	}
	return strings.Join(s, " ")
}

// lockPID reads the PID on the first line of a PostgreSQL lock file.
func lockPID(path string) (int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	// PostgreSQL writes a negative PID for a single-user backend.
	if pid < 0 {
		pid = -pid
	}
	return pid, err == nil && pid > 0
}
