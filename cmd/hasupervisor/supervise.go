package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Formation is $HA_DIR/formation.json (docs/API.md section 11).
type Formation struct {
	DatabaseURL   string       `json:"database_url"`
	HAProxy       HAProxy      `json:"haproxy"`
	Etcd          []EtcdMember `json:"etcd"`
	Nodes         []Node       `json:"nodes"`
	SupervisorPID int          `json:"supervisor_pid"`
	StatsURL      string       `json:"stats_url"`
	Scope         string       `json:"scope"` // Patroni's cluster name: its keys are under /service/<scope>/ in etcd
}

type HAProxy struct {
	PID  int `json:"pid"`
	Port int `json:"port"`
}

type EtcdMember struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	ClientURL string `json:"client_url"`
}

type Node struct {
	Name        string `json:"name"`
	Port        int    `json:"port"`
	PatroniREST string `json:"patroni_rest"`
	PatroniPID  int    `json:"patroni_pid"`
	PostgresPID int    `json:"postgres_pid"`
}

// child is one process the supervisor keeps running.
type child struct {
	name    string
	argv    []string
	log     string
	pid     int
	started time.Time
	backoff time.Duration
	exited  chan struct{} // closed when the current process is reaped
}

// supervisor owns the children, reaps them (and every orphan handed to it
// as subreaper) and restarts those that die.
type supervisor struct {
	cfg   config
	log   *slog.Logger
	cred  *syscall.Credential // the postgres user's, when run as root
	mu    sync.Mutex
	kids  []*child
	byPID map[int]*child
	down  bool
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER (linux/prctl.h).
const prSetChildSubreaper = 36

// Restart back-off: 0.5 s after a death, doubling to 4 s while the child
// keeps dying within a minute of its start: always within the 5 s of
// docs/API.md section 11.
const (
	firstBackoff = 500 * time.Millisecond
	maxBackoff   = 4 * time.Second
)

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("becoming the subreaper: %v", errno)
	}
	s := &supervisor{cfg: cfg, log: log, byPID: map[int]*child{}}
	if os.Getuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return errors.New("run as root, the formation runs as the postgres user, which is missing: make deps")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := os.WriteFile(cfg.supervisorPID(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(cfg.supervisorPID())
	defer os.Remove(cfg.formationPath())
	sec, err := loadSecrets(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "log"), 0o755); err != nil {
		return err
	}
	if err := render(cfg, sec); err != nil {
		return err
	}
	if s.cred != nil {
		if err := chownTree(cfg.Dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	go s.reap()
	defer s.stopAll()

	for i := 1; i <= 3; i++ {
		s.add(fmt.Sprintf("etcd%d", i), "etcd", "--config-file", filepath.Join(cfg.Dir, fmt.Sprintf("etcd%d.yml", i)))
	}
	if err := s.waitEtcd(ctx, 60*time.Second); err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		s.add(fmt.Sprintf("node%d", i), "patroni", filepath.Join(cfg.Dir, fmt.Sprintf("node%d.yml", i)))
	}
	s.add("haproxy", "haproxy", "-W", "-db", "-f", filepath.Join(cfg.Dir, "haproxy.cfg"))
	if err := s.waitWrites(ctx, sec, 180*time.Second); err != nil {
		return err
	}
	url := cfg.databaseURL(sec)
	log.Info("the formation takes writes", "database_url", url)
	var last []byte
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		f := s.formation(url)
		if b, _ := json.MarshalIndent(f, "", "  "); !bytes.Equal(b, last) {
			if err := writeAtomic(cfg.formationPath(), b); err != nil {
				log.Error("writing formation.json", "err", err)
			}
			last = b
		}
		select {
		case <-ctx.Done():
			log.Info("stopping the formation")
			return nil
		case <-tick.C:
		}
	}
}

// add starts a child and keeps it running until stopAll.
func (s *supervisor) add(name string, argv ...string) {
	c := &child{name: name, argv: argv, log: s.cfg.logPath(name), backoff: firstBackoff}
	s.mu.Lock()
	s.kids = append(s.kids, c)
	s.mu.Unlock()
	s.start(c)
}

func (s *supervisor) start(c *child) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return
	}
	out, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil && s.cred != nil {
		_ = out.Chown(int(s.cred.Uid), int(s.cred.Gid))
	}
	if err != nil {
		s.log.Error("opening a log", "child", c.name, "err", err)
		go s.restartLater(c)
		return
	}
	defer out.Close()
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Dir = s.cfg.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "HOME="+s.cfg.Dir)
	// Its own process group: a signal meant for the supervisor's terminal
	// does not reach it; the supervisor stops it itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	if err := cmd.Start(); err != nil {
		s.log.Error("starting", "child", c.name, "err", err)
		go s.restartLater(c)
		return
	}
	c.pid, c.started, c.exited = cmd.Process.Pid, time.Now(), make(chan struct{})
	s.byPID[c.pid] = c
	// The reaper waits for it (wait4 of any child), not cmd.Wait.
	_ = cmd.Process.Release()
	fmt.Fprintf(out, "hasupervisor: %s started, pid %d\n", time.Now().UTC().Format(time.RFC3339Nano), c.pid)
	s.log.Info("started", "child", c.name, "pid", c.pid)
}

func (s *supervisor) restartLater(c *child) {
	s.mu.Lock()
	wait := c.backoff
	if !c.started.IsZero() && time.Since(c.started) > time.Minute {
		wait = firstBackoff
	}
	c.backoff = min(2*wait, maxBackoff)
	s.mu.Unlock()
	time.Sleep(wait)
	s.start(c)
}

// reap waits for every child that ends, ours or an orphan's, and restarts
// ours unless the formation is stopping.
func (s *supervisor) reap() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	tick := time.NewTicker(time.Second) // a SIGCHLD may be merged with another
	defer tick.Stop()
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
			s.mu.Lock()
			c := s.byPID[pid]
			delete(s.byPID, pid)
			down := s.down
			s.mu.Unlock()
			if c == nil {
				continue // an orphan: a postmaster, or one of Patroni's helpers
			}
			close(c.exited)
			how := ws.Signal().String()
			if !ws.Signaled() {
				how = "exit status " + strconv.Itoa(ws.ExitStatus())
			}
			if f, err := os.OpenFile(c.log, os.O_WRONLY|os.O_APPEND, 0); err == nil {
				fmt.Fprintf(f, "hasupervisor: %s pid %d ended (%s)\n", time.Now().UTC().Format(time.RFC3339Nano), pid, how)
				f.Close()
			}
			if !down {
				s.log.Warn("died; starting it again", "child", c.name, "pid", pid, "how", how)
				go s.restartLater(c)
			}
		}
		select {
		case <-sigs:
		case <-tick.C:
		}
	}
}

// stopAll stops haproxy, then every Patroni (each stops its PostgreSQL),
// then etcd, and kills what is left after a deadline, postmasters too.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	s.down = true
	kids := append([]*child{}, s.kids...)
	s.mu.Unlock()
	stop := func(names func(string) bool, grace time.Duration) {
		var waits []*child
		s.mu.Lock()
		for _, c := range kids {
			if names(c.name) && c.exited != nil && s.byPID[c.pid] == c {
				_ = syscall.Kill(c.pid, syscall.SIGCONT) // one a chaos test left stopped
				_ = syscall.Kill(c.pid, syscall.SIGTERM)
				waits = append(waits, c)
			}
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		for _, c := range waits {
			select {
			case <-c.exited:
			case <-ctx.Done():
				s.log.Warn("did not stop in time; killing it", "child", c.name, "pid", c.pid)
				_ = syscall.Kill(c.pid, syscall.SIGKILL)
				// Reaped before the supervisor exits: this machine's init
				// would leave it a zombie.
				select {
				case <-c.exited:
				case <-time.After(5 * time.Second):
				}
			}
		}
	}
	stop(func(n string) bool { return n == "haproxy" }, 10*time.Second)
	stop(func(n string) bool { return strings.HasPrefix(n, "node") }, 60*time.Second)
	for i := 1; i <= 3; i++ {
		if pid := postmasterPID(s.cfg.nodeData(i)); pid > 0 {
			s.log.Warn("a postmaster outlived its Patroni; killing it", "pid", pid)
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown
			time.Sleep(2 * time.Second)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	stop(func(n string) bool { return strings.HasPrefix(n, "etcd") }, 10*time.Second)
	s.log.Info("the formation stopped")
}

// waitEtcd waits until every member answers healthy.
func (s *supervisor) waitEtcd(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	hc := &http.Client{Timeout: time.Second}
	for i := 1; i <= 3; {
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/health", s.cfg.etcdClientPort(i)))
		if err == nil {
			var h struct{ Health string }
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.Health == "true" {
				i++
				continue
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd%d is not healthy after %v (see %s)", i, limit, s.cfg.logPath(fmt.Sprintf("etcd%d", i)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// waitWrites waits until a commit through haproxy succeeds (in strict
// synchronous mode: once a standby holds it too), then makes the service's
// role and database if missing.
func (s *supervisor) waitWrites(ctx context.Context, sec secrets, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var lastErr error
	for time.Now().Before(deadline) {
		if lastErr = s.tryWrite(ctx, sec); lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("no commit through haproxy after %v: %v (see %s)", limit, lastErr, filepath.Join(s.cfg.Dir, "log"))
}

func (s *supervisor) tryWrite(ctx context.Context, sec secrets) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.cfg.superuserURL(sec))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var recovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery); err != nil {
		return err
	}
	if recovery {
		return errors.New("haproxy's server is in recovery")
	}
	// A row written: its commit waits for the synchronous standby (a
	// transaction that only took an ID, txid_current(), would not).
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS hasupervisor_probe (id int PRIMARY KEY, at timestamptz NOT NULL);
		INSERT INTO hasupervisor_probe VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = excluded.at`); err != nil {
		return err
	}
	app := sec.App
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%s') THEN
			CREATE ROLE %s LOGIN CREATEDB PASSWORD '%s';
		END IF; END $$`, app.User, app.User, app.Password)); err != nil {
		return err
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'payments')").Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE payments OWNER "+app.User); err != nil {
			return err
		}
	}
	return nil
}

// formation is formation.json now.
func (s *supervisor) formation(url string) Formation {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := Formation{DatabaseURL: url, HAProxy: HAProxy{Port: s.cfg.haproxyPort()}, SupervisorPID: os.Getpid(),
		StatsURL: fmt.Sprintf("http://127.0.0.1:%d/", s.cfg.statsPort()), Scope: "payments-ha"}
	pidOf := func(c *child) int {
		if s.byPID[c.pid] == c {
			return c.pid
		}
		return 0 // dead, and not started again yet
	}
	for _, c := range s.kids {
		switch {
		case c.name == "haproxy":
			f.HAProxy.PID = pidOf(c)
		case strings.HasPrefix(c.name, "etcd"):
			i, _ := strconv.Atoi(strings.TrimPrefix(c.name, "etcd"))
			f.Etcd = append(f.Etcd, EtcdMember{Name: c.name, PID: pidOf(c), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", s.cfg.etcdClientPort(i))})
		case strings.HasPrefix(c.name, "node"):
			i, _ := strconv.Atoi(strings.TrimPrefix(c.name, "node"))
			f.Nodes = append(f.Nodes, Node{Name: c.name, Port: s.cfg.pgPort(i), PatroniREST: fmt.Sprintf("http://127.0.0.1:%d", s.cfg.restPort(i)),
				PatroniPID: pidOf(c), PostgresPID: postmasterPID(s.cfg.nodeData(i))})
		}
	}
	return f
}

// postmasterPID is the PID of the live postmaster of a data directory, or 0:
// the first line of postmaster.pid, if that process is alive (not a zombie)
// and is a postgres.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ...: the comm may hold spaces; the state follows its ')'.
	st := string(stat)
	i := strings.LastIndexByte(st, ')')
	if i < 0 || i+2 >= len(st) || st[i+2] == 'Z' || !strings.Contains(st[:i], "postgres") {
		return 0
	}
	return pid
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}
