package pglocal

import (
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// serverUser is the OS account the server runs as. When we are not root the
// server simply runs as us; when we are root it runs as the "postgres" user,
// because initdb and postgres refuse to run as root.
type serverUser struct {
	uid, gid int
	name     string
	// credential is nil when no switch is needed.
	credential *syscall.Credential
}

func currentServerUser() (serverUser, error) {
	if os.Geteuid() != 0 {
		return serverUser{uid: os.Geteuid(), gid: os.Getegid(), name: "current user"}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return serverUser{}, fmt.Errorf("running as root, PostgreSQL must run as the \"postgres\" OS user, which does not exist "+
			"(install the postgresql package, or `useradd --system postgres`): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return serverUser{
		uid: uid, gid: gid, name: "postgres",
		credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true},
	}, nil
}

// ensureOwnedDir creates dir (mode 0700) if needed and gives it to the server user.
func (u serverUser) ensureOwnedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if u.credential == nil {
		return nil
	}
	return os.Chown(dir, u.uid, u.gid)
}

// relocationRoot is where a cluster lives when the server user cannot reach
// the directory asked for. /var/tmp survives reboots, unlike /tmp on many systems.
const relocationRoot = "/var/tmp"

// resolveDataDir returns the directory the server will really use for
// dataDir: dataDir itself, or where its symlink points, or, when the server
// user cannot reach it and relocation is allowed, a new directory under
// relocationRoot that dataDir is made a symlink to.
func (u serverUser) resolveDataDir(dataDir string, relocate bool, log *slog.Logger) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(dataDir); err == nil {
		dataDir = resolved
	}
	unreachable := u.checkReachable(dataDir)
	if unreachable == nil || !relocate {
		return dataDir, unreachable
	}
	if _, err := os.Lstat(dataDir); err == nil {
		return "", fmt.Errorf("%w (and it already exists, so it cannot become a symlink to a reachable place)", unreachable)
	}
	target := filepath.Join(relocationRoot, fmt.Sprintf("pglocal-%08x", fnv32(dataDir)), "data")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink(target, dataDir); err != nil {
		return "", err
	}
	log.Warn("the postgres OS user cannot reach the data directory; the cluster lives elsewhere, behind a symlink",
		slog.String("data_dir", dataDir), slog.String("cluster_dir", target))
	return target, u.checkReachable(target)
}

// checkReachable fails with an explanation when the server user cannot walk
// down to dir, which happens when we are root and dir sits under a mode-0700
// directory such as /root or a fresh `mktemp -d`.
func (u serverUser) checkReachable(dir string) error {
	if u.credential == nil {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for parent := filepath.Dir(abs); ; parent = filepath.Dir(parent) {
		info, err := os.Stat(parent)
		if err != nil {
			return err
		}
		if !u.canSearch(info) {
			return fmt.Errorf("the data directory %s is not reachable by the %q OS user that runs PostgreSQL: "+
				"%s (mode %v) does not let it through; choose a --data-dir elsewhere (for example under /var/tmp) "+
				"or allow it with `chmod o+x %s`", abs, u.name, parent, info.Mode().Perm(), parent)
		}
		if parent == filepath.Dir(parent) {
			return nil
		}
	}
}

func (u serverUser) canSearch(info os.FileInfo) bool {
	mode := info.Mode().Perm()
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	switch {
	case int(st.Uid) == u.uid:
		return mode&0o100 != 0
	case int(st.Gid) == u.gid:
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}
