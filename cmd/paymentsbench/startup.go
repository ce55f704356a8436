package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/example/payments/internal/keyfilter"
)

// startupResult is one start of `payments serve` on a scale database.
type startupResult struct {
	size     int
	liveKeys int64
	filterOn bool
	baseline bool // the -startup-baseline-bin binary, not -payments-bin
	// From the process's start (fork and exec) to /readyz answering 200,
	// and to its log line "key filter ready" (the rebuild's end); the
	// rebuild's own time as the process logged it.
	readyz, filterReady, rebuildTook time.Duration
	keysAdded                        int
	// from is where the filter came from, as the ready line says:
	// "rebuild" (every live key) or "snapshot" (and the keys made since).
	from string
	// VmRSS and VmHWM (/proc/PID/status) once ready, in bytes.
	rss, hwm int64
	// The filter's bits, from keyfilter.Stats of the same configuration.
	filterBytes int
}

// measureStartup starts the real binary, `payments serve`, against the
// target's database, as an operator would (the filter sized for the live
// keys with PAYMENTS_KEYFILTER_EXPECTED_KEYS), and times it until it is
// ready, with the key filter rebuilt.
func (b *bench) measureStartup(ctx context.Context, t *scaleTarget, filterOn, baseline bool) (*startupResult, error) {
	r := &startupResult{size: t.size, filterOn: filterOn, baseline: baseline}
	bin := b.o.paymentsBin
	if baseline {
		bin = b.o.baselineBin
	}
	var err error
	if r.liveKeys, err = b.countLiveKeys(ctx, t.db.name); err != nil {
		return nil, err
	}
	if _, err := b.monitor.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	cfg := filterConfigFor(int(r.liveKeys))
	if filterOn {
		f, err := keyfilter.New(cfg)
		if err != nil {
			return nil, err
		}
		r.filterBytes = f.Stats().Bytes
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+b.server.URL(t.db.name), "STRIPE_API_BASE="+b.simURL, "STRIPE_WEBHOOK_SECRET=whsec_bench_0123456789abcdef",
		"PAYMENTS_ADDR="+addr, "PAYMENTS_METRICS_ADDR=off", "PAYMENTS_RATE_LIMIT=0", "PAYMENTS_KEYFILTER="+strconv.FormatBool(filterOn),
		"PAYMENTS_KEYFILTER_EXPECTED_KEYS="+strconv.Itoa(int(cfg.ExpectedKeysPerSlice)))
	stderr, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	filterDone := make(chan logLine, 1)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	go watchLog(stderr, start, "key filter ready", filterDone)

	deadline := time.Now().Add(5 * time.Minute)
	client := &http.Client{Timeout: time.Second}
	for {
		if time.Now().After(deadline) {
			return nil, errors.New("/readyz did not answer 200 within 5 minutes")
		}
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				r.readyz = time.Since(start)
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if filterOn {
		select {
		case l := <-filterDone:
			r.filterReady = l.at
			r.rebuildTook = time.Duration(l.Took)
			r.keysAdded = l.Keys
			r.from = l.From
		case <-time.After(time.Until(deadline)):
			return nil, errors.New("the key filter was not ready within 5 minutes")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.rss, r.hwm = procMemory(cmd.Process.Pid)
	b.log.Info("start-up", slog.Int("size", t.size), slog.Bool("filter", filterOn), slog.String("from", r.from), slog.Bool("baseline", baseline), slog.Duration("readyz", r.readyz),
		slog.Duration("filter_ready", r.filterReady), slog.Duration("rebuild", r.rebuildTook),
		slog.String("rss_MiB", mib(r.rss)), slog.String("hwm_MiB", mib(r.hwm)), slog.Int("filter_bytes", r.filterBytes))
	return r, nil
}

// logLine is what watchLog reads of the service's JSON log line.
type logLine struct {
	Msg  string `json:"msg"`
	Took int64  `json:"took"` // slog writes a duration as nanoseconds
	Keys int    `json:"keys"`
	From string `json:"from"`
	at   time.Duration
}

// watchLog reads the process's log; the first line whose message is msg
// goes to found, with the time since start it was read. The rest is read
// and dropped, so the process never blocks on a full pipe.
func watchLog(r io.Reader, start time.Time, msg string, found chan<- logLine) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		if sent {
			continue
		}
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == msg {
			l.at = time.Since(start)
			found <- l
			sent = true
		}
	}
}

// procMemory reads VmRSS and VmHWM of pid, in bytes.
func procMemory(pid int) (rss, hwm int64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
