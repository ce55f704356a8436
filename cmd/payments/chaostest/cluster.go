package chaostest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The lines the processes print once they serve.
var (
	simListening     = regexp.MustCompile(`Stripe simulator listening on (http://\S+)`)
	apiListening     = regexp.MustCompile(`"msg":"API listening","addr":"([^"]+)"`)
	metricsListening = regexp.MustCompile(`"msg":"metrics listening","addr":"([^"]+)"`)
)

// webhookSecret signs the simulator's events; both sides know it.
const webhookSecret = "whsec_chaos_0123456789abcdef"

// ClusterConfig is what the processes need.
type ClusterConfig struct {
	Binary      string // the payments binary
	DatabaseURL string
	LogDir      string
	LockTimeout time.Duration
	KeyTTL      time.Duration // 0: the service's default
	// SMTPURL is the workers' mail server for receipts.
	SMTPURL string
	// AuthorisationLifetime is the simulator's: how long an uncaptured
	// authorisation lives before Stripe cancels it.
	AuthorisationLifetime time.Duration
	// WebhookDrop is the share of webhook events the relay drops.
	WebhookDrop float64
}

// completerGrace is the worker's PAYMENTS_COMPLETER_GRACE: an abandoned
// key is finished by the completer that long after its last try, at the
// earliest.
const completerGrace = 2 * time.Second

// Cluster is the processes of a run: the simulator, two API instances and
// two workers on one database, and the webhook relay between the simulator
// and the instances. Like a real deployment mid-rollout, the processes do
// not share their settings: each has its own lock timeout (see
// instanceSettings), so a process that judged another's lock by its own
// timeout would take over live requests.
type Cluster struct {
	cfg     ClusterConfig
	sim     *process
	SimURL  string
	Serve   []*Instance
	Workers []*Instance
	relay   *webhookRelay
}

// instanceSettings are what sets each process apart: its name, and its
// lock timeout as a multiple of ClusterConfig.LockTimeout (L). serve-b holds
// its locks twice as long as serve-a, and heartbeats them every 2L/3;
// worker-a, whose own timeout is L/2, would find serve-b's locks lapsed
// between two of those heartbeats if it judged them by its own timeout.
// serve-b also runs without the key filter, and the workers' completers
// differ in grace.
var instanceSettings = []struct {
	name     string
	worker   bool
	lockMult float64
	env      []string
}{
	{name: "serve-a", lockMult: 1},
	{name: "serve-b", lockMult: 2, env: []string{"PAYMENTS_KEYFILTER=false", "PAYMENTS_SHUTDOWN_TIMEOUT=3s"}},
	{name: "worker-a", worker: true, lockMult: 0.5, env: []string{"PAYMENTS_COMPLETER_GRACE=" + completerGrace.String()}},
	{name: "worker-b", worker: true, lockMult: 1.5, env: []string{"PAYMENTS_COMPLETER_GRACE=" + (2 * completerGrace).String()}},
}

// webhookRetrySchedule is the run's PAYMENTS_WEBHOOK_RETRY_SCHEDULE: a
// dozen retries over about half a minute (River adds up to 5 s to each),
// longer than any trouble of the merchants' receiver lasts.
const webhookRetrySchedule = "200ms,500ms,1s,1s,2s,2s,2s,2s,3s,3s,3s,3s"

// minLockTimeout is the shortest lock timeout a process of the run gets.
const minLockTimeout = 300 * time.Millisecond

// StartCluster starts every process and waits until each serves.
func StartCluster(ctx context.Context, cfg ClusterConfig, dupShare float64, seed uint64) (_ *Cluster, err error) {
	c := &Cluster{cfg: cfg}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	c.relay, err = startWebhookRelay(dupShare, cfg.WebhookDrop, seed, func() []string {
		var urls []string
		for _, in := range c.Serve {
			urls = append(urls, in.URL())
		}
		return urls
	})
	if err != nil {
		return nil, err
	}
	c.sim, c.SimURL, err = startProcess(ctx, cfg.Binary, filepath.Join(cfg.LogDir, "stripesim.log"), nil, simListening, true,
		"stripesim", "--addr", "127.0.0.1:0", "--webhook-url", c.relay.url+"/v1/stripe/webhooks", "--webhook-secret", webhookSecret,
		"--authorisation-lifetime", cfg.AuthorisationLifetime.String())
	if err != nil {
		return nil, err
	}
	common := []string{
		"DATABASE_URL=" + cfg.DatabaseURL, "STRIPE_API_BASE=" + c.SimURL, "STRIPE_WEBHOOK_SECRET=" + webhookSecret,
		"PAYMENTS_RATE_LIMIT=0", "PAYMENTS_SHUTDOWN_TIMEOUT=5s", "PAYMENTS_METRICS_ADDR=127.0.0.1:0",
		// A key Stripe stored a 500 under moves on to a new derived key 5 s
		// after its first replayed 500, not a minute: longer than the 0-3 s
		// after which the work of an armed late_500 lands (faults.go), so a
		// grace too short to cover it would show as a double charge.
		"PAYMENTS_STRIPE_SPENT_KEY_GRACE=5s",
		// The merchants' receiver is on loopback; retries come within
		// seconds, not hours, so that the run sees them all.
		"PAYMENTS_WEBHOOK_ALLOW_PRIVATE=true", "PAYMENTS_WEBHOOK_RETRY_SCHEDULE=" + webhookRetrySchedule,
	}
	if cfg.KeyTTL > 0 {
		common = append(common, "PAYMENTS_IDEMPOTENCY_KEY_TTL="+cfg.KeyTTL.String())
	}
	workerEnv := []string{
		"PAYMENTS_METRICS_ADDR=127.0.0.1:0", "PAYMENTS_COMPLETER_INTERVAL=500ms", "PAYMENTS_ENQUEUER_POLL_INTERVAL=200ms",
		// What a lost webhook would have told (every instance down when
		// Stripe sent it, or CHAOS_WEBHOOK_DROP) the reconciler reads from
		// Stripe: 2 s after the last change, then 4 s, capped at 4 s, so
		// everything is read again within seconds once the chaos is over.
		"PAYMENTS_RECONCILE_AFTER=2s", "PAYMENTS_RECONCILE_INTERVAL=1s", "PAYMENTS_RECONCILE_BACKOFF_CAP=4s",
		"PAYMENTS_RECONCILE_RATE=50",
		"SMTP_URL=" + cfg.SMTPURL,
		// RFC 5321's timeouts, scaled to the run: a send hung by the fake
		// server (mail.go) gives up in seconds, not 5 or 10 minutes, so the
		// run settles; its slowest answer (5 s) stays within them.
		"PAYMENTS_SMTP_COMMAND_TIMEOUT=10s", "PAYMENTS_SMTP_DATA_TIMEOUT=20s",
	}
	for _, set := range instanceSettings {
		lock := max(minLockTimeout, time.Duration(set.lockMult*float64(cfg.LockTimeout))).Round(time.Millisecond)
		env := append(append([]string{}, common...), "PAYMENTS_LOCK_TIMEOUT="+lock.String())
		in := &Instance{Name: set.name, cluster: c, LockTimeout: lock}
		if set.worker {
			in.args, in.ready, in.env = []string{"worker"}, metricsListening, append(append(env, workerEnv...), set.env...)
		} else {
			in.args, in.ready, in.env, in.api = []string{"serve"}, apiListening, append(env, set.env...), true
		}
		if err := in.Start(ctx, ""); err != nil {
			return nil, err
		}
		if set.worker {
			c.Workers = append(c.Workers, in)
		} else {
			c.Serve = append(c.Serve, in)
		}
	}
	return c, nil
}

// Instances are the service's processes: the API instances and the workers.
func (c *Cluster) Instances() []*Instance {
	return append(append([]*Instance{}, c.Serve...), c.Workers...)
}

// IsWorker tells whether in is one of the workers.
func (c *Cluster) IsWorker(in *Instance) bool { return slices.Contains(c.Workers, in) }

// Close stops every process and the relay; it may be called again.
func (c *Cluster) Close() {
	for _, in := range c.Instances() {
		if in != nil {
			in.Kill()
		}
	}
	if c.sim != nil {
		c.sim.kill()
	}
	if c.relay != nil {
		c.relay.close()
	}
}

// Instance is one service process slot (an API instance or the worker),
// which its successive processes fill: a restart starts a new process in it.
// An API instance keeps its address across restarts, as behind a load
// balancer.
type Instance struct {
	Name string
	// LockTimeout is the process's PAYMENTS_LOCK_TIMEOUT.
	LockTimeout time.Duration
	cluster     *Cluster
	args        []string
	env         []string
	ready       *regexp.Regexp // the log line that says it serves, with its address
	api         bool           // an API instance, which keeps its address

	mu          sync.Mutex
	proc        *process
	addr        string // the API's address, kept across restarts
	url         atomic.Pointer[string]
	failpoint   string
	incarnation int
}

// Start starts a new process in the slot, with PAYMENTS_FAILPOINTS=failpoint,
// and waits until it serves. The previous process must be gone.
func (in *Instance) Start(ctx context.Context, failpoint string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc != nil && !in.proc.hasExited() {
		return fmt.Errorf("chaos: %s is still running", in.Name)
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		if in.api && (in.addr == "" || try > 0) {
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			in.addr = addr
		}
		in.incarnation++
		env := append(append([]string{}, in.env...), "PAYMENTS_FAILPOINTS="+failpoint)
		if in.api {
			env = append(env, "PAYMENTS_ADDR="+in.addr)
		}
		log := filepath.Join(in.cluster.cfg.LogDir, fmt.Sprintf("%s.%03d.log", in.Name, in.incarnation))
		p, addr, err := startProcess(ctx, in.cluster.cfg.Binary, log, env, in.ready, false, in.args...)
		if err != nil {
			lastErr = err // most likely the address was taken meanwhile: try another
			continue
		}
		in.proc, in.failpoint = p, failpoint
		u := "http://" + addr // the API's and the metrics' lines give host:port
		in.url.Store(&u)
		return nil
	}
	return fmt.Errorf("chaos: starting %s: %w", in.Name, lastErr)
}

// URL is where the instance serves (the API, or the worker's metrics).
func (in *Instance) URL() string {
	if u := in.url.Load(); u != nil {
		return *u
	}
	return "http://127.0.0.1:1"
}

// Kill SIGKILLs the current process and waits for it to be gone.
func (in *Instance) Kill() {
	in.mu.Lock()
	p := in.proc
	in.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Terminate sends SIGTERM and waits for a graceful exit, killing the
// process if it takes longer than timeout. It tells whether the exit was clean.
func (in *Instance) Terminate(timeout time.Duration) bool {
	in.mu.Lock()
	p := in.proc
	in.mu.Unlock()
	if p == nil {
		return true
	}
	p.byUs.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode() == 0
	case <-time.After(timeout):
		p.kill()
		return false
	}
}

// Exited is closed when the current process ends.
func (in *Instance) Exited() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.proc.exited
}

// Died tells whether the current process ended without being stopped by
// us, and how: the failpoint it ran with and its exit status.
func (in *Instance) Died() (died bool, failpoint, how string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	p := in.proc
	if p == nil || !p.hasExited() || p.byUs.Load() {
		return false, "", ""
	}
	return true, in.failpoint, p.cmd.ProcessState.String()
}

// DiedOfSIGKILL tells whether the current process ended by SIGKILL (which is
// how a crash failpoint ends it).
func (in *Instance) DiedOfSIGKILL() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	ws, ok := in.proc.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Failpoint is the PAYMENTS_FAILPOINTS the current process runs with.
func (in *Instance) Failpoint() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.failpoint
}

// LogTail is the end of the current process's log, for a report.
func (in *Instance) LogTail(n int) string {
	in.mu.Lock()
	p := in.proc
	in.mu.Unlock()
	if p == nil {
		return ""
	}
	return tail(p.logPath, n)
}

// process is one running payments process whose output goes to a log file.
type process struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	byUs    atomic.Bool // stopped by the harness, not by itself
}

// startProcess starts `payments args...` with env (added to a clean copy of
// ours) and waits until its output (stdout when onStdout, else stderr)
// matches ready, returning the first group.
func startProcess(ctx context.Context, binary, logPath string, env []string, ready *regexp.Regexp, onStdout bool, args ...string) (*process, string, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append(cleanEnv(), env...)
	// Its own process group: a Ctrl-C of the test run reaches the harness,
	// which then kills its processes itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	found := make(chan string, 1)
	watched := &readyWatcher{re: ready, found: found, w: logFile}
	if onStdout {
		cmd.Stdout, cmd.Stderr = watched, logFile
	} else {
		cmd.Stdout, cmd.Stderr = logFile, watched
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, "", err
	}
	p := &process{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case addr := <-found:
		return p, addr, nil
	case <-p.exited:
		return nil, "", fmt.Errorf("payments %s exited before serving: %s\n%s", args[0], cmd.ProcessState, tail(logPath, 5))
	case <-timer.C:
	case <-ctx.Done():
	}
	p.kill()
	return nil, "", fmt.Errorf("payments %s did not serve in time", args[0])
}

func (p *process) kill() {
	p.byUs.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// readyWatcher passes output through to w and reports the first line that
// matches re.
type readyWatcher struct {
	re      *regexp.Regexp
	found   chan string
	w       io.Writer
	partial []byte
	done    bool
}

func (r *readyWatcher) Write(b []byte) (int, error) {
	if !r.done {
		r.partial = append(r.partial, b...)
		for {
			i := strings.IndexByte(string(r.partial), '\n')
			if i < 0 {
				break
			}
			if m := r.re.FindSubmatch(r.partial[:i]); m != nil {
				r.found <- string(m[1])
				r.done, r.partial = true, nil
				break
			}
			r.partial = r.partial[i+1:]
		}
	}
	return r.w.Write(b)
}

// cleanEnv is our environment without anything that configures the service:
// each process gets exactly the settings the harness gives it.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PAYMENTS_") || strings.HasPrefix(name, "STRIPE_") || name == "DATABASE_URL" || name == "SMTP_URL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freeAddr finds a loopback address nobody listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
