package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// devLockFile is the file in --data-dir that one `payments dev` at a time
// holds an exclusive flock(2) on, for as long as it runs (and an operator
// command, such as `payments keys`, while it runs the cluster itself). Its
// content is the holder's PID, its API address (dev's, once it listens) and
// its command, one to a line, for the message of a second one.
//
// The lock is the kernel's, on the open file: it ends when the holder's
// process ends, however it ends (SIGKILL, a crash), and never outlives it.
// So a dev started again at once after a crash takes it, and then waits for
// the crashed run's PostgreSQL as before (pglocal); a dev started beside a
// live one finds it taken and stops before it touches anything: the
// cluster, the simulator's state file, the ports. The file is opened with
// O_CLOEXEC (as Go opens every file), so PostgreSQL, our child, does not
// inherit the lock and cannot keep it after we are gone.
const devLockFile = "dev.lock"

// devLock is a held lock on a data directory.
type devLock struct {
	f       *os.File
	command string
}

// errDataDirInUse is the error of a dev that found the lock taken.
var errDataDirInUse = errors.New("the data directory is in use")

// lockDataDir creates dataDir if need be and takes its lock without
// waiting, for command ("payments dev"). When another process holds it, the
// error (errDataDirInUse) names that process's command, PID and address, as
// far as it has written them yet.
func lockDataDir(dataDir, command string) (*devLock, error) {
	// 0755, as pglocal makes it: the postgres OS user (when we are root)
	// must reach the cluster inside.
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the data directory: %w", err)
	}
	path := filepath.Join(dataDir, devLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err == nil {
		l := &devLock{f: f, command: command}
		// Our PID at once; the address once we listen (setAddr).
		return l, l.write("")
	}
	defer f.Close()
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	pid, addr, holder := readDevLock(path, time.Second)
	if holder == "" {
		holder = "payments dev"
	}
	switch {
	case pid != "" && addr != "":
		holder = fmt.Sprintf("another %s (PID %s, API on http://%s)", holder, pid, addr)
	case pid != "":
		holder = fmt.Sprintf("another %s (PID %s)", holder, pid)
	default:
		holder = "another " + holder
	}
	stop := "stop it first (Ctrl-C in its terminal"
	if pid != "" {
		stop += ", or kill " + pid
	}
	stop += ")"
	return nil, fmt.Errorf("%w: %s runs on --data-dir %s; %s, or give this one another --data-dir (PAYMENTS_DATA_DIR)",
		errDataDirInUse, holder, dataDir, stop)
}

// readDevLock reads the holder's PID, address and command. A holder writes
// them right after it took the lock, and dev its address a moment later:
// while the file is empty, or dev's address is, it is read again for up to
// wait.
func readDevLock(path string, wait time.Duration) (pid, addr, command string) {
	deadline := time.Now().Add(wait)
	for {
		b, _ := os.ReadFile(path)
		lines := strings.Split(string(b), "\n")
		if len(lines) >= 3 {
			pid, addr, command = lines[0], lines[1], lines[2]
		}
		if (pid != "" && (addr != "" || command != "payments dev")) || time.Now().After(deadline) {
			return pid, addr, command
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// setAddr records the API's address beside our PID.
func (l *devLock) setAddr(addr string) error {
	return l.write(addr)
}

// write replaces the file's content, in a single write after the
// truncation, so that a reader sees the old content, nothing, or the new.
func (l *devLock) write(addr string) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"+addr+"\n"+l.command+"\n"), 0)
	return err
}

// release ends the lock; the file stays, and its stale content means
// nothing without the lock.
func (l *devLock) release() {
	_ = l.f.Close()
}
