package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// renderForTest renders the templates of deploy/ha into a temporary HA_DIR.
func renderForTest(t *testing.T) config {
	t.Helper()
	cfg := config{Dir: t.TempDir(), PortBase: 27000, Templates: "../../deploy/ha"}
	s, err := loadSecrets(cfg)
	require.NoError(t, err)
	t.Setenv("PAYMENTS_PG_BINDIR", "/usr/lib/postgresql/15/bin") // render only names it
	require.NoError(t, render(cfg, s))
	return cfg
}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m), path)
	return m
}

func dig(t *testing.T, m map[string]any, path ...string) any {
	t.Helper()
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		require.True(t, ok, "%v: %s is not a map", path, p)
		v, ok = mm[p]
		require.True(t, ok, "%v: no %s", path, p)
	}
	return v
}

// The rendered Patroni config keeps the settings docs/API.md section 11
// names, and Patroni's rule for its timings.
func TestRender_patroniKeepsTheFormationsPromises(t *testing.T) {
	cfg := renderForTest(t)
	for i := 1; i <= 3; i++ {
		node := readYAML(t, filepath.Join(cfg.Dir, "node"+string(rune('0'+i))+".yml"))
		dcs := dig(t, node, "bootstrap", "dcs").(map[string]any)
		require.Equal(t, true, dcs["synchronous_mode"])
		require.Equal(t, true, dcs["synchronous_mode_strict"])
		require.Equal(t, true, dig(t, dcs, "postgresql", "use_pg_rewind"))
		require.Equal(t, true, dig(t, dcs, "postgresql", "use_slots"))
		ttl, loop, retry := dcs["ttl"].(int), dcs["loop_wait"].(int), dcs["retry_timeout"].(int)
		// Patroni's dynamic_configuration.html: loop_wait + 2 * retry_timeout <= ttl.
		require.LessOrEqual(t, loop+2*retry, ttl)
		require.Equal(t, cfg.pgPort(i), portOf(t, dig(t, node, "postgresql", "listen").(string)))
		require.Equal(t, cfg.restPort(i), portOf(t, dig(t, node, "restapi", "listen").(string)))
		require.Equal(t, cfg.nodeData(i), dig(t, node, "postgresql", "data_dir"))
	}
	etcd := readYAML(t, filepath.Join(cfg.Dir, "etcd2.yml"))
	require.Equal(t, true, etcd["enable-v2"], "Patroni speaks etcd's v2 API (patroni.yml.tmpl says why)")
	require.Contains(t, etcd["listen-client-urls"], ":27012")
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, ok := strings.Cut(addr, ":")
	require.True(t, ok, addr)
	var n int
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

// haproxyChecks is the lines of an haproxy config that decide where
// connections go and how fast a change is seen.
func haproxyChecks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		for _, p := range []string{"option httpchk", "http-check", "default-server", "timeout ", "mode ", "retries"} {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return out
}

// docker-compose.yml's profile "ha" is the same formation as make ha's: the
// same Patroni dynamic configuration, the same haproxy checks, the same
// etcd timings (it cannot run here: no Docker engine; this holds it to
// deploy/ha's templates instead).
func TestCompose_haProfileIsTheSameFormation(t *testing.T) {
	cfg := renderForTest(t)
	node := readYAML(t, filepath.Join(cfg.Dir, "node1.yml"))
	compose := readYAML(t, "../../deploy/ha/patroni-compose.yml")
	require.Equal(t, dig(t, node, "bootstrap", "dcs"), dig(t, compose, "bootstrap", "dcs"))
	require.Equal(t, dig(t, node, "bootstrap", "initdb"), dig(t, compose, "bootstrap", "initdb"))
	require.Equal(t, dig(t, node, "watchdog"), dig(t, compose, "watchdog"))

	rendered := haproxyChecks(t, filepath.Join(cfg.Dir, "haproxy.cfg"))
	require.Contains(t, rendered, "option httpchk OPTIONS /primary")
	require.Contains(t, rendered, "http-check expect status 200")
	require.Equal(t, rendered, haproxyChecks(t, "../../deploy/ha/haproxy-compose.cfg"))

	dc := readYAML(t, "../../docker-compose.yml")
	etcd := readYAML(t, filepath.Join(cfg.Dir, "etcd1.yml"))
	env := dig(t, dc, "x-ha-etcd", "environment").(map[string]any)
	require.Equal(t, etcd["heartbeat-interval"], atoi(t, env["ETCD_HEARTBEAT_INTERVAL"]))
	require.Equal(t, etcd["election-timeout"], atoi(t, env["ETCD_ELECTION_TIMEOUT"]))
	services := dig(t, dc, "services").(map[string]any)
	for _, name := range []string{"etcd1", "etcd2", "etcd3", "pg1", "pg2", "pg3", "haproxy", "ha-init"} {
		svc, ok := services[name].(map[string]any)
		require.True(t, ok, "docker-compose.yml has no service %s", name)
		require.Equal(t, []any{"ha"}, svc["profiles"], "%s is not in the profile ha", name)
	}
}

func atoi(t *testing.T, v any) int {
	t.Helper()
	s, ok := v.(string)
	require.True(t, ok, "%v is not a string", v)
	return portOf(t, ":"+s)
}
