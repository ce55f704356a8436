package main_test

// Without a Docker engine on the build machines, the Dockerfile and the
// compose file are checked here: their syntax, their shape, and that every
// command they run exists in the binary with the flags they pass.

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/webhooktest"
)

var repoRoot = filepath.Join("..", "..")

// requireCommandExists runs `payments <sub> -h` and checks every --flag of args is listed.
func requireCommandExists(t *testing.T, args []string) {
	t.Helper()
	require.NotEmpty(t, args)
	sub := args[0]
	out, err := exec.Command(binary, sub, "-h").CombinedOutput()
	require.NoError(t, err, "payments %s -h: %s", sub, out)
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "--") {
			flag := strings.SplitN(strings.TrimPrefix(a, "--"), "=", 2)[0]
			require.Contains(t, string(out), "  -"+flag+" ", "payments %s has no flag --%s", sub, flag)
		}
	}
}

type composeFile struct {
	Services map[string]struct {
		Build       any               `yaml:"build"`
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Restart     string            `yaml:"restart"`
		StopGrace   string            `yaml:"stop_grace_period"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func TestDeploy_composeFileRunsRealCommands(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c), "docker-compose.yml is valid YAML")

	for _, name := range []string{"postgres", "migrate", "serve", "worker", "stripesim"} {
		require.Contains(t, c.Services, name)
	}
	require.Equal(t, []string{"migrate", "up"}, c.Services["migrate"].Command, "a one-shot migration")
	for _, name := range []string{"serve", "worker"} {
		s := c.Services[name]
		require.Equal(t, "service_completed_successfully", s.DependsOn["migrate"].Condition, "%s waits for the migration", name)
		require.NotEmpty(t, s.Environment["DATABASE_URL"])
		// README, "Shutting down": Docker must give the process longer than
		// its shutdown timeout (35 s by default) to cancel and answer what
		// is still in flight before it SIGKILLs it (Docker's default is 10 s).
		grace, err := time.ParseDuration(s.StopGrace)
		require.NoError(t, err, "%s sets stop_grace_period", name)
		require.Greater(t, grace, 35*time.Second+cancelledAnswers, "%s's stop_grace_period", name)
	}
	for name, s := range c.Services {
		oneShot := s.Restart == "no"
		require.True(t, oneShot || len(s.Healthcheck.Test) > 0, "%s, a long-running service, has a health check", name)
		if s.Build != "." {
			continue // not the payments image (deploy/ha's runs Patroni, etcd and haproxy)
		}
		requireCommandExists(t, s.Command)
		if len(s.Healthcheck.Test) > 2 && s.Healthcheck.Test[0] == "CMD" && strings.HasSuffix(s.Healthcheck.Test[1], "/payments") {
			requireCommandExists(t, s.Healthcheck.Test[2:])
		}
		for dep := range s.DependsOn {
			require.Contains(t, c.Services, dep, "%s depends on a service that exists", name)
		}
	}
}

// Every image the compose file pulls is pinned to a release (a tag of at
// least major.minor, such as postgres:15.18 or riverui:0.22.0): never
// :latest, no tag, or a bare major version, which move under the same
// file and make one checkout run different software from one day to the
// next.
func TestDeploy_composeImagesArePinned(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c))
	release := regexp.MustCompile(`^v?[0-9]+\.[0-9]+(\.[0-9]+)?(-[a-z0-9.]+)?$`)
	for name, s := range c.Services {
		if s.Build != nil {
			continue // built here (payments:local)
		}
		require.NotEmpty(t, s.Image, "%s has an image", name)
		ref := s.Image[strings.LastIndexByte(s.Image, '/')+1:]
		_, tag, ok := strings.Cut(ref, ":")
		require.True(t, ok, "%s's image %s names a tag", name, s.Image)
		require.Regexp(t, release, tag, "%s's image %s is pinned to a release", name, s.Image)
	}
}

// Prometheus scrapes serve and worker where they listen and evaluates the
// alerting rules; Grafana gets the dashboard and a data source that is
// Prometheus. Every file the compose file mounts is in the repository.
func TestDeploy_composeRunsPrometheusAndGrafanaOnTheDeployFiles(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c))
	// mounts maps each container path of a service to the repository file it mounts.
	mounts := func(service string) map[string]string {
		require.Contains(t, c.Services, service)
		m := map[string]string{}
		for _, v := range c.Services[service].Volumes {
			parts := strings.Split(v, ":")
			if !strings.HasPrefix(parts[0], "./") {
				continue // a named volume
			}
			_, err := os.Stat(filepath.Join(repoRoot, parts[0]))
			require.NoError(t, err, "%s mounts a file of the repository", service)
			m[parts[1]] = filepath.Clean(parts[0])
		}
		return m
	}

	prom := mounts("prometheus")
	var promCfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	require.Equal(t, "deploy/prometheus/prometheus.yml", prom["/etc/prometheus/prometheus.yml"])
	raw, err = os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "prometheus.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &promCfg))
	require.Len(t, promCfg.RuleFiles, 1)
	require.Equal(t, "deploy/prometheus/alerts.yml", prom[promCfg.RuleFiles[0]], "Prometheus loads the alerting rules")
	var targets []string
	for _, sc := range promCfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	serveAddr := flagValue(t, c.Services["serve"].Command, "--metrics-addr")
	workerAddr := flagValue(t, c.Services["worker"].Command, "--metrics-addr")
	require.ElementsMatch(t, []string{"serve:" + port(serveAddr), "worker:" + port(workerAddr)}, targets,
		"Prometheus scrapes serve's and the worker's metrics listeners where they listen")
	require.NotEqual(t, port(flagValue(t, c.Services["serve"].Command, "--addr")), port(serveAddr),
		"serve's metrics are not on the API's port")

	grafana := mounts("grafana")
	require.Equal(t, "deploy/grafana/payments.json", grafana["/var/lib/grafana/dashboards/payments.json"])
	require.Equal(t, "deploy/grafana/provisioning", grafana["/etc/grafana/provisioning"])
	var provider struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	raw, err = os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "provisioning", "dashboards", "payments.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &provider))
	require.Len(t, provider.Providers, 1)
	require.Equal(t, "/var/lib/grafana/dashboards", provider.Providers[0].Options.Path, "Grafana loads the mounted dashboard")
	var sources struct {
		Datasources []struct {
			Type, URL string
			IsDefault bool `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	raw, err = os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &sources))
	require.Len(t, sources.Datasources, 1)
	require.Equal(t, "prometheus", sources.Datasources[0].Type)
	require.Equal(t, "http://prometheus:9090", sources.Datasources[0].URL)
	require.True(t, sources.Datasources[0].IsDefault, "the dashboard's data source variable defaults to it")
}

// Tracing on a laptop (API.md section 9): serve and worker export over
// OTLP to the collector, where its configuration listens, and the
// collector's traces pipeline hands the spans to Jaeger, whose UI is
// published.
func TestDeploy_composeTracesThroughTheCollectorToJaeger(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c))
	for _, name := range []string{"otel-collector", "jaeger"} {
		_, ok := c.Services[name]
		require.True(t, ok, "docker-compose.yml runs %s", name)
	}

	collector := c.Services["otel-collector"]
	configPath := flagValue(t, collector.Command, "--config")
	var mounted string
	for _, v := range collector.Volumes {
		if parts := strings.Split(v, ":"); parts[1] == configPath {
			mounted = filepath.Clean(parts[0])
		}
	}
	require.Equal(t, "deploy/otel-collector/config.yml", mounted, "the collector runs on the repository's configuration")
	raw, err = os.ReadFile(filepath.Join(repoRoot, mounted))
	require.NoError(t, err)
	var cfg struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					HTTP struct{ Endpoint string } `yaml:"http"`
				} `yaml:"protocols"`
			} `yaml:"otlp"`
		} `yaml:"receivers"`
		Exporters map[string]struct{ Endpoint string } `yaml:"exporters"`
		Service   struct {
			Pipelines map[string]struct {
				Receivers, Exporters []string
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	httpPort := port(cfg.Receivers.OTLP.Protocols.HTTP.Endpoint)
	for _, name := range []string{"serve", "worker"} {
		require.Equal(t, "http://otel-collector:"+httpPort, c.Services[name].Environment["OTEL_EXPORTER_OTLP_ENDPOINT"],
			"%s exports to the collector's OTLP/HTTP receiver", name)
		require.Empty(t, c.Services[name].Environment["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/protobuf, the default")
	}
	traces := cfg.Service.Pipelines["traces"]
	require.Equal(t, []string{"otlp"}, traces.Receivers)
	require.Len(t, traces.Exporters, 1)
	exporter := cfg.Exporters[traces.Exporters[0]]
	require.Equal(t, "jaeger:4317", exporter.Endpoint, "the collector forwards to Jaeger's OTLP/gRPC port")
	require.Contains(t, c.Services["jaeger"].Ports, "127.0.0.1:16686:16686", "Jaeger's UI, on the laptop only")
}

// flagValue is the value of --name in a command line.
func flagValue(t *testing.T, command []string, name string) string {
	t.Helper()
	for i, a := range command {
		if a == name && i+1 < len(command) {
			return command[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	t.Fatalf("%v has no %s", command, name)
	return ""
}

func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

func TestDeploy_dockerfileIsMultiStageNonRootAndBuildsTheBinary(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	var froms []string
	var user, entrypoint string
	var builds bool
	instruction := regexp.MustCompile(`^([A-Z]+)\s+(.*)$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := instruction.FindStringSubmatch(line)
		require.NotNil(t, m, "not a Dockerfile instruction: %q", line)
		switch m[1] {
		case "FROM":
			froms = append(froms, m[2])
		case "USER":
			user = m[2]
		case "ENTRYPOINT":
			entrypoint = m[2]
		case "RUN":
			builds = builds || strings.Contains(m[2], "go build") && strings.Contains(m[2], "./cmd/payments")
		case "WORKDIR", "COPY", "EXPOSE", "CMD", "ENV", "ARG", "LABEL":
		default:
			t.Fatalf("unexpected instruction %s", m[1])
		}
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, len(froms), 2, "multi-stage")
	require.True(t, builds, "builds ./cmd/payments")
	require.NotEmpty(t, user)
	require.NotContains(t, []string{"root", "0", "0:0", "root:root"}, user, "the runtime user is not root")
	require.Contains(t, entrypoint, "/payments")

	// The build stage's Go is the one go.mod asks for.
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+\.\d+)$`).FindSubmatch(mod)
	require.NotNil(t, goVersion)
	require.Contains(t, froms[0], "golang:"+string(goVersion[1])+"-", "pinned to go.mod's release, not a floating minor")
}

// cancelledAnswers is how long a process may take, after its shutdown
// timeout, to answer the requests it cancelled.
const cancelledAnswers = 10 * time.Second

// The Grafana dashboard and the Prometheus alerting rules ask only for
// metrics the service exposes: every metric name in their PromQL is in a
// real /metrics of serve or worker (the processes docker-compose.yml
// scrapes), after the traffic that makes each labelled metric appear. The
// rule file parses with Prometheus' own parser, which parses each rule's
// PromQL too.
func TestDeploy_dashboardAndAlertRulesUseMetricsTheServiceExposes(t *testing.T) {
	t.Parallel()
	exposed := scrapeServeAndWorker(t)

	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	groups, errs := rulefmt.Parse(raw, false, model.UTF8Validation, promParser, slog.New(slog.DiscardHandler))
	require.Empty(t, errs, "deploy/prometheus/alerts.yml")
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "rule %q of group %s is an alert", r.Expr, g.Name)
			require.NotEmpty(t, r.Annotations["summary"], "alert %s says what happened", r.Alert)
			requireExposed(t, exposed, "alert "+r.Alert, r.Expr)
			alerts++
		}
	}
	// docs/metrics.md, "What to alert on".
	for _, metric := range []string{"payments_idempotency_keys_needing_attention", "payments_idempotency_keys_oldest_unfinished_age_seconds",
		"payments_staged_jobs_backlog", "payments_webhook_deliveries_total", "payments_webhook_oldest_pending_delivery_age_seconds",
		"payments_db_serialization_retries_total", "payments_http_requests_total", "payments_stripe_webhooks_total"} {
		require.Contains(t, string(raw), metric, "an alert watches %s", metric)
	}

	raw, err = os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "payments.json"))
	require.NoError(t, err)
	var dashboard grafanaPanels
	require.NoError(t, json.Unmarshal(raw, &dashboard), "deploy/grafana/payments.json")
	targets := 0
	var walk func(panels []grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			walk(p.Panels)
			for _, target := range p.Targets {
				requireExposed(t, exposed, "panel "+p.Title, target.Expr)
				targets++
			}
		}
	}
	walk(dashboard.Panels)
	require.Greater(t, alerts, 5)
	require.Greater(t, targets, 15)
}

type grafanaPanels struct {
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

var promParser = parser.NewParser(parser.Options{})

// requireExposed parses expr and checks every metric it selects is exposed.
func requireExposed(t *testing.T, exposed map[string]bool, where, expr string) {
	t.Helper()
	parsed, err := promParser.ParseExpr(expr)
	require.NoError(t, err, "%s: %s", where, expr)
	selects := 0
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			selects++
			require.True(t, exposed[vs.Name], "%s uses %s, which neither serve nor worker exposes", where, vs.Name)
		}
		return nil
	})
	require.NotZero(t, selects, "%s selects no metric: %s", where, expr)
}

// scrapeServeAndWorker runs serve and worker, makes every labelled metric
// appear (a payment, a Stripe webhook, a delivery to a merchant), and
// returns the metric names their /metrics expose.
func scrapeServeAndWorker(t *testing.T) map[string]bool {
	t.Helper()
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	serve, base := startServe(t, dbURL, simURL, "PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true", "STRIPE_WEBHOOK_SECRET=whsec_test_deploy")
	worker := startProc(t, []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0", "PAYMENTS_ENQUEUER_POLL_INTERVAL=50ms",
		"PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true"}, "worker")
	workerMetrics := "http://" + worker.waitFor(t, &worker.stderr, metricsListening) + "/metrics"

	receiver := webhooktest.NewReceiver(t)
	status, data, err := postIdempotent(t, base, "/v1/webhook_endpoints", "endpoint", `{"url":"`+receiver.URL()+`"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	status, data, err = createPayment(t, base, "deploy-metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	resp, err := http.Post(base+"/v1/stripe/webhooks", "application/json", strings.NewReader(`{"id":"evt_unsigned"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "an unsigned Stripe webhook is refused, and counted")

	exposed := map[string]bool{}
	scrape := func(url string) {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			exposed[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
		}
		require.NoError(t, sc.Err())
	}
	require.Eventually(t, func() bool {
		scrape(workerMetrics)
		return exposed["payments_webhook_deliveries_total"]
	}, 60*time.Second, 50*time.Millisecond, "the worker delivers the payment's event to the merchant")
	scrape("http://" + serve.waitFor(t, &serve.stderr, metricsListening) + "/metrics")
	return exposed
}
