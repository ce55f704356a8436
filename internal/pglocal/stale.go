package pglocal

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clearStaleLocks makes sure no lock file stops the next start.
//
// PostgreSQL writes postmaster.pid in the data directory and a .lock file next
// to its socket. After a crash they stay behind; PostgreSQL removes them itself
// only when their PID is not alive, so a PID since reused by another process
// (common in containers) would block the start forever. We remove a lock whose
// PID is not a postgres server on this data directory. If it is one, it is a
// server of ours that outlived its parent: we shut it down first.
func clearStaleLocks(ctx context.Context, log *slog.Logger, dataDir, socketDir string) error {
	locks := []string{
		filepath.Join(dataDir, "postmaster.pid"),
		filepath.Join(socketDir, fmt.Sprintf(".s.PGSQL.%d.lock", port)),
	}
	for _, lock := range locks {
		pid, ok := lockPID(lock)
		if !ok {
			continue
		}
		if isOurPostmaster(pid, dataDir) {
			log.Warn("a postgres from an earlier run still holds the data directory; shutting it down",
				slog.Int("pid", pid), slog.String("data_dir", dataDir))
			if err := stopPID(ctx, pid); err != nil {
				return err
			}
		}
		if err := os.Remove(lock); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing stale lock file: %w", err)
		}
		log.Info("removed stale postgres lock file", slog.String("file", lock), slog.Int("pid", pid))
	}
	return nil
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

// isOurPostmaster tells whether pid is a postgres process serving dataDir.
func isOurPostmaster(pid int, dataDir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) == 0 || filepath.Base(args[0]) != "postgres" {
		return false
	}
	for i, arg := range args {
		if arg == "-D" && i+1 < len(args) && args[i+1] == dataDir {
			return true
		}
	}
	return false
}

// stopPID shuts a server down by PID: fast, then immediate, then SIGKILL.
func stopPID(ctx context.Context, pid int) error {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
		if err := syscall.Kill(pid, sig); err != nil {
			return nil // already gone
		}
		deadline := time.Now().Add(stopTimeout)
		for time.Now().Before(deadline) {
			if syscall.Kill(pid, 0) != nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return fmt.Errorf("postgres (pid %d) from an earlier run does not exit", pid)
}
