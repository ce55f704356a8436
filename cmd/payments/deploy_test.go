package main_test

// Without a Docker engine on the build machines, the Dockerfile and the
// compose file are checked here: their syntax, their shape, and that every
// command they run exists in the binary with the flags they pass.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
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
		if s.Build == nil {
			continue // not our image
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
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	require.NotNil(t, goVersion)
	require.Contains(t, froms[0], "golang:"+string(goVersion[1]))
}

// cancelledAnswers is how long a process may take, after its shutdown
// timeout, to answer the requests it cancelled.
const cancelledAnswers = 10 * time.Second
