package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
)

// config is where the formation lives and what it listens on.
type config struct {
	Dir       string // HA_DIR, absolute
	PortBase  int    // HA_PORT_BASE
	Templates string // HA_TEMPLATES
}

func configFromEnv() (config, error) {
	cfg := config{Dir: ".ha", PortBase: 26000, Templates: "deploy/ha"}
	if v := os.Getenv("HA_DIR"); v != "" {
		cfg.Dir = v
	}
	if v := os.Getenv("HA_TEMPLATES"); v != "" {
		cfg.Templates = v
	}
	if v := os.Getenv("HA_PORT_BASE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 || n > 65535-100 {
			return cfg, fmt.Errorf("HA_PORT_BASE=%q: want a port from 1024 to 65435", v)
		}
		cfg.PortBase = n
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return cfg, err
	}
	cfg.Dir = dir
	return cfg, nil
}

// The ports, from HA_PORT_BASE (B): haproxy B (PostgreSQL's protocol, to
// the primary) and B+1 (its stats page); etcd member i (1 to 3) B+10+i for
// clients and B+20+i for its peers; node i's PostgreSQL B+30+i and its
// Patroni's REST API B+40+i.
func (c config) haproxyPort() int         { return c.PortBase }
func (c config) statsPort() int           { return c.PortBase + 1 }
func (c config) etcdClientPort(i int) int { return c.PortBase + 10 + i }
func (c config) etcdPeerPort(i int) int   { return c.PortBase + 20 + i }
func (c config) pgPort(i int) int         { return c.PortBase + 30 + i }
func (c config) restPort(i int) int       { return c.PortBase + 40 + i }

// allPorts is every port the formation listens on.
func (c config) allPorts() []int {
	ports := []int{c.haproxyPort(), c.statsPort()}
	for i := 1; i <= 3; i++ {
		ports = append(ports, c.etcdClientPort(i), c.etcdPeerPort(i), c.pgPort(i), c.restPort(i))
	}
	return ports
}

func (c config) formationPath() string   { return filepath.Join(c.Dir, "formation.json") }
func (c config) supervisorPID() string   { return filepath.Join(c.Dir, "supervisor.pid") }
func (c config) supervisorLog() string   { return filepath.Join(c.Dir, "supervisor.log") }
func (c config) nodeDir(i int) string    { return filepath.Join(c.Dir, fmt.Sprintf("node%d", i)) }
func (c config) nodeData(i int) string   { return filepath.Join(c.nodeDir(i), "data") }
func (c config) etcdData(i int) string   { return filepath.Join(c.Dir, fmt.Sprintf("etcd%d", i)) }
func (c config) logPath(n string) string { return filepath.Join(c.Dir, "log", n+".log") }

// credential is a PostgreSQL role and its password.
type credential struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// secrets are the formation's passwords, made once per HA_DIR and kept in
// $HA_DIR/secrets.json (mode 0600).
type secrets struct {
	Superuser   credential `json:"superuser"`
	Replication credential `json:"replication"`
	Rewind      credential `json:"rewind"`
	App         credential `json:"app"` // the service's role, owner of its database
}

func loadSecrets(c config) (secrets, error) {
	path := filepath.Join(c.Dir, "secrets.json")
	var s secrets
	if b, err := os.ReadFile(path); err == nil {
		return s, json.Unmarshal(b, &s)
	} else if !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	pw := func() string {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	s = secrets{Superuser: credential{"postgres", pw()}, Replication: credential{"replicator", pw()},
		Rewind: credential{"rewinder", pw()}, App: credential{"payments", pw()}}
	b, _ := json.MarshalIndent(s, "", "  ")
	return s, os.WriteFile(path, b, 0o600)
}

// databaseURL is the service's URL, through haproxy.
func (c config) databaseURL(s secrets) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/payments?sslmode=disable", s.App.User, s.App.Password, c.haproxyPort())
}

// superuserURL is the superuser's URL through haproxy, on the maintenance database.
func (c config) superuserURL(s secrets) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=3", s.Superuser.User, s.Superuser.Password, c.haproxyPort())
}

type etcdData struct {
	Name, DataDir, ClientURL, PeerURL, InitialCluster string
}

type nodeData struct {
	Name                   string
	Dir, DataDir, BinDir   string
	PGPort, RESTPort       int
	EtcdHosts              string
	Superuser, Replication credential
	Rewind                 credential
}

type haproxyData struct {
	Dir             string
	Port, StatsPort int
	Nodes           []nodeData
}

// render writes the formation's configs into HA_DIR from the templates.
func render(c config, s secrets) error {
	load := func(name string) (*template.Template, error) {
		return template.ParseFiles(filepath.Join(c.Templates, name))
	}
	etcdT, err := load("etcd.yml.tmpl")
	if err != nil {
		return err
	}
	patroniT, err := load("patroni.yml.tmpl")
	if err != nil {
		return err
	}
	haproxyT, err := load("haproxy.cfg.tmpl")
	if err != nil {
		return err
	}
	binDir, err := pgBinDir()
	if err != nil {
		return err
	}
	var peers, hosts []string
	for i := 1; i <= 3; i++ {
		peers = append(peers, fmt.Sprintf("etcd%d=http://127.0.0.1:%d", i, c.etcdPeerPort(i)))
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", c.etcdClientPort(i)))
	}
	write := func(t *template.Template, path string, data any) error {
		var b strings.Builder
		if err := t.Execute(&b, data); err != nil {
			return err
		}
		return os.WriteFile(path, []byte(b.String()), 0o600)
	}
	var nodes []nodeData
	for i := 1; i <= 3; i++ {
		e := etcdData{Name: fmt.Sprintf("etcd%d", i), DataDir: c.etcdData(i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", c.etcdClientPort(i)), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", c.etcdPeerPort(i)),
			InitialCluster: strings.Join(peers, ",")}
		if err := write(etcdT, filepath.Join(c.Dir, e.Name+".yml"), e); err != nil {
			return err
		}
		n := nodeData{Name: fmt.Sprintf("node%d", i), Dir: c.nodeDir(i), DataDir: c.nodeData(i), BinDir: binDir,
			PGPort: c.pgPort(i), RESTPort: c.restPort(i), EtcdHosts: strings.Join(hosts, ","),
			Superuser: s.Superuser, Replication: s.Replication, Rewind: s.Rewind}
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return err
		}
		if err := write(patroniT, filepath.Join(c.Dir, n.Name+".yml"), n); err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	return write(haproxyT, filepath.Join(c.Dir, "haproxy.cfg"),
		haproxyData{Dir: c.Dir, Port: c.haproxyPort(), StatsPort: c.statsPort(), Nodes: nodes})
}

// pgBinDir is where PostgreSQL 15's server binaries are: PAYMENTS_PG_BINDIR
// (as for the tests), else Debian's place, else where postgres is on PATH.
func pgBinDir() (string, error) {
	if d := os.Getenv("PAYMENTS_PG_BINDIR"); d != "" {
		return d, nil
	}
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/postgres"); err == nil {
		return "/usr/lib/postgresql/15/bin", nil
	}
	p, err := exec.LookPath("postgres")
	if err != nil {
		return "", errors.New("PostgreSQL's server binaries are missing: make deps")
	}
	p, err = filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	return filepath.Dir(p), nil
}
