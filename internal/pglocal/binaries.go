package pglocal

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrNoServerBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoServerBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found in $PAYMENTS_PG_BINDIR, $PATH or /usr/lib/postgresql/*/bin; " +
	"install them with `apt-get install postgresql` (Debian/Ubuntu) or set PAYMENTS_PG_BINDIR")

// debianBinGlob is where Debian and Ubuntu install each major version's server.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns the directory holding initdb and postgres: the one named by
// $PAYMENTS_PG_BINDIR, else the one on $PATH, else Debian's newest version.
func FindBinDir() (string, error) {
	if dir := os.Getenv("PAYMENTS_PG_BINDIR"); dir != "" {
		if hasServer(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("PAYMENTS_PG_BINDIR=%s: %w", dir, ErrNoServerBinaries)
	}
	if path, err := exec.LookPath("postgres"); err == nil {
		if dir := filepath.Dir(path); hasServer(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob(debianBinGlob)
	sort.Slice(dirs, func(i, j int) bool { return majorVersion(dirs[i]) > majorVersion(dirs[j]) })
	for _, dir := range dirs {
		if hasServer(dir) {
			return dir, nil
		}
	}
	return "", ErrNoServerBinaries
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// majorVersion reads 15 out of /usr/lib/postgresql/15/bin; 0 when it is not a number.
func majorVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}
