package chaostest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	paymentsclient "github.com/example/payments/client"
)

// The database's chaos (docs/API.md section 11): the run's database is
// make ha's formation (deploy/ha: three etcd members, three PostgreSQL
// nodes under Patroni with synchronous_mode_strict, haproxy), and HA kills
// or pauses its primary, one fault at a time, while the clients' load runs.
// It measures what each promise of section 11 is about; HAReport judges it.

// Formation is make ha's $HA_DIR/formation.json.
type Formation struct {
	DatabaseURL string `json:"database_url"`
	HAProxy     struct {
		PID  int `json:"pid"`
		Port int `json:"port"`
	} `json:"haproxy"`
	Etcd []struct {
		Name      string `json:"name"`
		PID       int    `json:"pid"`
		ClientURL string `json:"client_url"`
	} `json:"etcd"`
	Nodes []struct {
		Name        string `json:"name"`
		Port        int    `json:"port"`
		PatroniREST string `json:"patroni_rest"`
		PatroniPID  int    `json:"patroni_pid"`
		PostgresPID int    `json:"postgres_pid"`
	} `json:"nodes"`
	Scope string `json:"scope"`
}

// ReadFormation reads formation.json.
func ReadFormation(path string) (Formation, error) {
	var f Formation
	b, err := os.ReadFile(path)
	if err != nil {
		return f, fmt.Errorf("chaos-ha: reading %s (is make ha running?): %w", path, err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("chaos-ha: %s: %w", path, err)
	}
	if f.DatabaseURL == "" || len(f.Nodes) == 0 || len(f.Etcd) == 0 {
		return f, fmt.Errorf("chaos-ha: %s lacks the database URL, nodes or etcd members", path)
	}
	if f.Scope == "" {
		f.Scope = "payments-ha"
	}
	return f, nil
}

// The faults, in the order they run.
const (
	FaultKillPostmaster = "kill -9 the primary's postmaster"
	FaultKillPatroni    = "kill -9 the leader's Patroni (its PostgreSQL left running)"
	FaultPause          = "SIGSTOP the primary's Patroni and PostgreSQL, SIGCONT later"
)

// HA runs the database's faults during a chaos run (Options.HA).
type HA struct {
	// FormationPath is make ha's formation.json, read again before each
	// fault (the PIDs change).
	FormationPath string
	// DatabaseURL is the run's database, through haproxy: the probe commits
	// there, the lock watcher reads its keys.
	DatabaseURL string
	// Warmup is the load before the first fault; Pause how long the paused
	// machine stays stopped; Cooldown the load after each fault's
	// measurements, before the next precondition.
	Warmup, Pause, Cooldown time.Duration
	// LockWindow bounds the wait for the keys in flight at a fault to be
	// free again (longer than every process's lock lifetime, so that a key
	// left to lapse is measured, not cut off).
	LockWindow time.Duration
	// Faults run in this order (default: all three).
	Faults []string

	logf    func(string, ...any)
	mu      sync.Mutex
	start   time.Time
	atts    []haAttempt
	probeOK []time.Time
	probeNo []time.Time              // failed probes
	ready   map[string][]readySample // by instance name
	locks   map[lockID]time.Time     // live locks, first seen
	lockAt  []lockPoll
	Results []FaultResult
}

type haAttempt struct {
	op     Op
	start  time.Time
	end    time.Time
	status int
	code   string // the problem's code
	err    bool   // no answer
}

type readySample struct {
	at     time.Time
	status int // 0: no answer
}

type lockID struct {
	id    string // the key's row (a UUID)
	token int64
}

// lockPoll is one successful read of the live locks, with when each was
// taken (locked_at).
type lockPoll struct {
	at   time.Time
	live map[lockID]time.Time
}

// FaultResult is what one fault did.
type FaultResult struct {
	Fault string
	Node  string // the primary it hit
	At    time.Time
	// LeaseExpiry is when the paused leader's key ran out (etcd's lease
	// time to live at the fault); zero for the other faults.
	LeaseExpiry time.Time
	// Reference is what the 15 s are counted from: the fault, or for a
	// paused machine its lease running out.
	Reference time.Time
	// OutageStart is the probe's first failure after the fault (a
	// txid_current() through haproxy on a connection of its own, every
	// 200 ms, on a 1 s deadline): a postmaster's backends may commit for a
	// moment after it was killed, and haproxy takes a moment to mark a
	// node down. With no failure within 15 s of the fault, the fault itself.
	OutageStart time.Time
	// ProbeBack is the probe's first commit after OutageStart.
	ProbeBack time.Time
	// ServiceBack is the first 2xx answered to an attempt of the clients
	// sent after OutageStart.
	ServiceBack time.Time
	// WritesBack is when the new primary took writes: the earlier of
	// ProbeBack and ServiceBack (both are commits through haproxy; the
	// probe's own reconnection, a TCP and SCRAM handshake on a starved CPU,
	// may lag the service's pool by a second or two).
	WritesBack time.Time
	// NewPrimary is the node Patroni names primary once writes are back.
	NewPrimary string
	// Answers during the fault, from the fault to 5 s after ServiceBack.
	Unavailable503, Other503, Status500, ConnErrors, InUse409 int
	// Ready is, by instance, how long after OutageStart its /readyz first
	// answered 503 (-1: never) and how long after WritesBack it
	// answered 200 again (-1: not seen).
	ReadyDown, ReadyUp map[string]time.Duration
	// LockedKeys is how many keys held a live lock when the database was
	// last read before the outage and still held it after; LongestLocked is
	// the longest of them stayed locked after WritesBack (LockWindow if
	// still locked then: LockCutOff).
	LockedKeys    int
	LongestLocked time.Duration
	LockCutOff    bool
	Err           string // the fault could not be carried out
}

func (h *HA) defaults() {
	if h.Warmup == 0 {
		h.Warmup = 10 * time.Second
	}
	if h.Pause == 0 {
		h.Pause = 30 * time.Second
	}
	if h.Cooldown == 0 {
		h.Cooldown = 5 * time.Second
	}
	if h.LockWindow == 0 {
		h.LockWindow = 45 * time.Second
	}
	if len(h.Faults) == 0 {
		h.Faults = []string{FaultKillPostmaster, FaultKillPatroni, FaultPause}
	}
	h.ready = map[string][]readySample{}
	h.locks = map[lockID]time.Time{}
}

// observe records an attempt of the clients (driver.watch).
func (h *HA) observe(op Op, at paymentsclient.Attempt) {
	end := time.Now()
	a := haAttempt{op: op, start: end.Add(-at.Duration), end: end, status: at.Status, err: at.Err != nil}
	if at.Status >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(at.Body, &p)
		a.code = p.Code
	}
	h.mu.Lock()
	h.atts = append(h.atts, a)
	h.mu.Unlock()
}

// run carries out the faults, one after the other, with the watchers
// running from the start; it returns when the last fault's measurements are
// done. A fault starts only while load (the run's chaos window) lasts.
func (h *HA) run(ctx, load context.Context, cluster *Cluster, logf func(string, ...any)) {
	h.logf = logf
	h.start = time.Now()
	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopWatch()
		wg.Wait()
	}()
	wg.Go(func() { h.probe(watchCtx) })
	wg.Go(func() { h.watchLocks(watchCtx) })
	for _, in := range cluster.Instances() {
		wg.Go(func() { h.watchReady(watchCtx, in) })
	}
	sleep(ctx, h.Warmup)
	for _, fault := range h.Faults {
		if ctx.Err() != nil {
			return
		}
		r := FaultResult{Fault: fault, Err: "the load ended before it (CHAOS_DURATION)"}
		if load.Err() == nil {
			r = h.inject(ctx, fault, cluster)
		}
		h.mu.Lock()
		h.Results = append(h.Results, r)
		h.mu.Unlock()
		logf("chaos-ha: %s", r.Summary())
		sleep(ctx, h.Cooldown)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// inject waits for a healthy formation, carries out one fault and measures it.
func (h *HA) inject(ctx context.Context, fault string, cluster *Cluster) FaultResult {
	r := FaultResult{Fault: fault}
	f, primary, err := h.healthy(ctx, 90*time.Second)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	node := f.Nodes[primary]
	r.Node = node.Name
	var stopped []int
	switch fault {
	case FaultKillPostmaster:
		r.At = time.Now()
		err = syscall.Kill(node.PostgresPID, syscall.SIGKILL)
	case FaultKillPatroni:
		r.At = time.Now()
		err = syscall.Kill(node.PatroniPID, syscall.SIGKILL)
	case FaultPause:
		ttl, lerr := leaseTTL(ctx, f)
		if lerr != nil {
			r.Err = lerr.Error()
			return r
		}
		stopped = append([]int{node.PatroniPID, node.PostgresPID}, childrenOf(node.PostgresPID)...)
		r.At = time.Now()
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		r.LeaseExpiry = r.At.Add(ttl)
	default:
		err = fmt.Errorf("no such fault %q", fault)
	}
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Reference = r.At
	if !r.LeaseExpiry.IsZero() {
		r.Reference = r.LeaseExpiry
	}
	h.logf("chaos-ha: %s on %s", fault, node.Name)
	if len(stopped) > 0 {
		sleep(ctx, h.Pause)
		// Continued in the reverse order: the postmaster's children, the
		// postmaster, then Patroni (which then finds it lost its key).
		for _, pid := range slices.Backward(stopped) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		h.logf("chaos-ha: %s continued after %v", node.Name, h.Pause)
	}
	// Writes back: the probe's first commit after its first failure, and
	// the service's first 2xx.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		h.mu.Lock()
		r.OutageStart = firstAfter(h.probeNo, r.At)
		if !r.OutageStart.IsZero() {
			r.ProbeBack = firstAfter(h.probeOK, r.OutageStart)
		} else if time.Since(r.At) > 15*time.Second && len(stopped) == 0 {
			r.OutageStart, r.ProbeBack = r.At, firstAfter(h.probeOK, r.At) // no outage at all
		}
		h.mu.Unlock()
		if !r.ProbeBack.IsZero() {
			break
		}
		sleep(ctx, 100*time.Millisecond)
	}
	if r.ProbeBack.IsZero() {
		r.Err = "no commit through haproxy within 90 s of the fault"
		return r
	}
	r.NewPrimary = primaryNow(ctx, h.mustFormation())
	h.measure(&r)
	r.WritesBack = r.ProbeBack
	if !r.ServiceBack.IsZero() && r.ServiceBack.Before(r.ProbeBack) {
		r.WritesBack = r.ServiceBack
	}
	// The keys in flight at the outage: those whose lock, live at the first
	// read after it, was taken before it began, or was seen at the last
	// read before it.
	before, after := h.lockPollsAround(ctx, r.WritesBack)
	var held []lockID
	for id, lockedAt := range after.live {
		if _, seen := before.live[id]; seen || lockedAt.Before(r.OutageStart) {
			held = append(held, id)
		}
	}
	r.LockedKeys = len(held)
	lockDeadline := r.WritesBack.Add(h.LockWindow)
	for len(held) > 0 && ctx.Err() == nil {
		h.mu.Lock()
		last := h.lockAt[len(h.lockAt)-1]
		h.mu.Unlock()
		held = slices.DeleteFunc(held, func(id lockID) bool {
			if _, ok := last.live[id]; ok {
				return false
			}
			r.LongestLocked = max(r.LongestLocked, last.at.Sub(r.WritesBack))
			return true
		})
		if len(held) > 0 && time.Now().After(lockDeadline) {
			r.LongestLocked, r.LockCutOff = h.LockWindow, true
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	// The service's first 2xx, and /readyz back to 200 (up to 20 s more).
	until := time.Now().Add(20 * time.Second)
	for time.Now().Before(until) && ctx.Err() == nil {
		h.measure(&r)
		if !r.ServiceBack.IsZero() && allUp(r.ReadyUp) {
			break
		}
		sleep(ctx, 250*time.Millisecond)
	}
	sleep(ctx, time.Until(r.ServiceBack.Add(5*time.Second)))
	h.measure(&r)
	return r
}

func allUp(m map[string]time.Duration) bool {
	for _, d := range m {
		if d < 0 {
			return false
		}
	}
	return len(m) > 0
}

// measure fills in what the attempts and /readyz samples say about r.
func (h *HA) measure(r *FaultResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.ServiceBack = time.Time{}
	for _, a := range h.atts {
		if !a.err && a.status >= 200 && a.status < 300 && !a.start.Before(r.OutageStart) && (r.ServiceBack.IsZero() || a.end.Before(r.ServiceBack)) {
			r.ServiceBack = a.end
		}
	}
	end := time.Now()
	if !r.ServiceBack.IsZero() {
		end = r.ServiceBack.Add(5 * time.Second)
	}
	r.Unavailable503, r.Other503, r.Status500, r.ConnErrors, r.InUse409 = 0, 0, 0, 0, 0
	for _, a := range h.atts {
		if a.end.Before(r.At) || a.end.After(end) {
			continue
		}
		switch {
		case a.err:
			r.ConnErrors++
		case a.status == http.StatusServiceUnavailable && a.code == "service_unavailable":
			r.Unavailable503++
		case a.status == http.StatusServiceUnavailable:
			r.Other503++
		case a.status >= 500:
			r.Status500++
		case a.status == http.StatusConflict:
			r.InUse409++
		}
	}
	r.ReadyDown, r.ReadyUp = map[string]time.Duration{}, map[string]time.Duration{}
	for name, samples := range h.ready {
		r.ReadyDown[name], r.ReadyUp[name] = -1, -1
		for _, s := range samples {
			if s.at.Before(r.At) {
				continue
			}
			if s.status == http.StatusServiceUnavailable && r.ReadyDown[name] < 0 {
				r.ReadyDown[name] = max(0, s.at.Sub(r.OutageStart))
			}
			if s.status == http.StatusOK && !r.WritesBack.IsZero() && !s.at.Before(r.WritesBack) && r.ReadyUp[name] < 0 {
				r.ReadyUp[name] = s.at.Sub(r.WritesBack)
			}
		}
	}
}

// lockPollsAround returns the last read of the locks before t's outage (the
// last successful one before the fault's first failed read, or simply
// before t) and the first one at or after t.
func (h *HA) lockPollsAround(ctx context.Context, t time.Time) (before, after lockPoll) {
	deadline := time.Now().Add(30 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		h.mu.Lock()
		i := slices.IndexFunc(h.lockAt, func(p lockPoll) bool { return !p.at.Before(t) })
		if i > 0 {
			before, after = h.lockAt[i-1], h.lockAt[i]
			h.mu.Unlock()
			return before, after
		}
		h.mu.Unlock()
		sleep(ctx, 100*time.Millisecond)
	}
	return before, after
}

// healthy waits until Patroni reports a leader, a synchronous standby and a
// third running node, and haproxy's node is that leader; it returns the
// formation and the primary's index.
func (h *HA) healthy(ctx context.Context, limit time.Duration) (Formation, int, error) {
	deadline := time.Now().Add(limit)
	var why string
	for {
		f, err := ReadFormation(h.FormationPath)
		if err != nil {
			return f, -1, err
		}
		primary, reason := clusterState(ctx, f)
		if primary >= 0 {
			return f, primary, nil
		}
		why = reason
		if time.Now().After(deadline) || ctx.Err() != nil {
			return f, -1, fmt.Errorf("the formation was not healthy within %v: %s", limit, why)
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// clusterState asks Patroni's /cluster for the members: the leader's index
// when every node runs (a leader, a sync standby, a replica) and has a live
// postmaster in formation.json.
func clusterState(ctx context.Context, f Formation) (int, string) {
	var cl struct {
		Members []struct {
			Name  string `json:"name"`
			Role  string `json:"role"`
			State string `json:"state"`
		} `json:"members"`
	}
	var lastErr error
	for _, n := range f.Nodes {
		if err := getJSON(ctx, n.PatroniREST+"/cluster", &cl); err != nil {
			lastErr = err
			continue
		}
		break
	}
	if cl.Members == nil {
		return -1, fmt.Sprintf("no Patroni answered /cluster: %v", lastErr)
	}
	leader, sync := "", 0
	for _, m := range cl.Members {
		if m.State != "running" && m.State != "streaming" {
			return -1, fmt.Sprintf("%s is %s", m.Name, m.State)
		}
		switch m.Role {
		case "leader", "master", "primary":
			leader = m.Name
		case "sync_standby":
			sync++
		}
	}
	if leader == "" || sync == 0 || len(cl.Members) < len(f.Nodes) {
		return -1, fmt.Sprintf("members %+v: want a leader, a sync standby and every node", cl.Members)
	}
	for i, n := range f.Nodes {
		if n.Name == leader {
			if n.PostgresPID <= 0 || n.PatroniPID <= 0 {
				return -1, n.Name + " has no live postmaster or Patroni in formation.json yet"
			}
			return i, ""
		}
	}
	return -1, "the leader " + leader + " is not in formation.json"
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// leaseTTL is how long Patroni's leader key has left: its TTL in etcd's v2
// store, where Patroni keeps it (deploy/ha/patroni.yml.tmpl), in whole
// seconds.
func leaseTTL(ctx context.Context, f Formation) (time.Duration, error) {
	var lastErr error
	for _, e := range f.Etcd {
		var key struct {
			Node struct {
				TTL *int `json:"ttl"`
			} `json:"node"`
		}
		if lastErr = getJSON(ctx, e.ClientURL+"/v2/keys/service/"+f.Scope+"/leader", &key); lastErr != nil {
			continue
		}
		if key.Node.TTL == nil || *key.Node.TTL < 0 {
			return 0, fmt.Errorf("etcd holds no leader key with a TTL for %s", f.Scope)
		}
		return time.Duration(*key.Node.TTL) * time.Second, nil
	}
	return 0, fmt.Errorf("no etcd member answered: %v", lastErr)
}

// childrenOf is the PIDs whose parent is pid (a postmaster's backends and
// helpers), from /proc.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st := string(stat)
		i := strings.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(st[i+1:]) // state, ppid, ...
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// primaryNow is the node whose Patroni answers 200 to /primary (haproxy's
// check), or "none".
func primaryNow(ctx context.Context, f Formation) string {
	for _, n := range f.Nodes {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodOptions, n.PatroniREST+"/primary", nil)
		if err == nil {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					cancel()
					return n.Name
				}
			}
		}
		cancel()
	}
	return "none"
}

func (h *HA) mustFormation() Formation {
	f, _ := ReadFormation(h.FormationPath)
	return f
}

// pollDatabase calls try every 200 ms until ctx ends, on one connection
// to h.DatabaseURL, made again after a try fails; each try, the connection
// included, has a deadline of 1 s (pgx closes the socket at the deadline:
// no cancel request, which during a synchronous-replication wait would
// make PostgreSQL report a commit only the old primary holds). done is
// told how each try ended.
func (h *HA) pollDatabase(ctx context.Context, try func(ctx context.Context, conn *pgx.Conn) error, done func(error)) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := func() error {
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if conn == nil || conn.IsClosed() {
				var err error
				if conn, err = pgx.Connect(c, h.DatabaseURL); err != nil {
					conn = nil
					return err
				}
			}
			return try(c, conn)
		}()
		done(err)
		if err != nil && conn != nil {
			conn.Close(context.Background())
			conn = nil
		}
	}
}

// probe commits through haproxy every 200 ms (pollDatabase). The commit
// writes a row: a transaction that only took an ID (txid_current()) writes
// its commit record without waiting for the synchronous standby, and
// proves nothing.
func (h *HA) probe(ctx context.Context) {
	h.pollDatabase(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "INSERT INTO chaos_ha_probe (id, at) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = excluded.at")
		return err
	}, func(err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil {
			h.probeNo = append(h.probeNo, time.Now())
		} else {
			h.probeOK = append(h.probeOK, time.Now())
		}
	})
}

// watchLocks reads the live locks every 200 ms (pollDatabase).
func (h *HA) watchLocks(ctx context.Context) {
	var live map[lockID]time.Time
	h.pollDatabase(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT id::text, lock_token, locked_at FROM idempotency_keys WHERE lock_expires_at > now()")
		if err != nil {
			return err
		}
		live = map[lockID]time.Time{}
		for rows.Next() {
			var id lockID
			var at time.Time
			if err := rows.Scan(&id.id, &id.token, &at); err != nil {
				return err
			}
			live[id] = at
		}
		return rows.Err()
	}, func(err error) {
		if err != nil {
			return // no reading: the outage shows in the probe's record
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.lockAt = append(h.lockAt, lockPoll{at: time.Now(), live: live})
	})
}

// watchReady asks the instance's /readyz every 250 ms.
func (h *HA) watchReady(ctx context.Context, in *Instance) {
	// Longer than the service's own bound on /readyz's probe (2 s): a slow
	// answer is an answer.
	client := &http.Client{Timeout: 3 * time.Second}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := readySample{}
		resp, err := client.Get(in.URL() + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.status = resp.StatusCode
		}
		s.at = time.Now()
		h.mu.Lock()
		h.ready[in.Name] = append(h.ready[in.Name], s)
		h.mu.Unlock()
	}
}

func firstAfter(ts []time.Time, t time.Time) time.Time {
	i, _ := slices.BinarySearchFunc(ts, t, func(a, b time.Time) int { return a.Compare(b) })
	if i < len(ts) {
		return ts[i]
	}
	return time.Time{}
}

// Summary is one line about the fault.
func (r FaultResult) Summary() string {
	if r.Err != "" {
		return fmt.Sprintf("%s: not carried out: %s", r.Fault, r.Err)
	}
	return fmt.Sprintf("%s on %s: no commit through haproxy from %s to %s after the fault: back %s, first 2xx of the service %s after %s; new primary %s; %d x 503 service_unavailable, %d other 503, %d x 5xx, %d connection errors; %d keys locked across it, the longest free %s after the commit",
		r.Fault, r.Node, secs(r.OutageStart.Sub(r.At)), secs(r.ProbeBack.Sub(r.At)), secs(r.ProbeBack.Sub(r.Reference)), secs(r.ServiceBack.Sub(r.Reference)), r.refName(), r.NewPrimary,
		r.Unavailable503, r.Other503, r.Status500, r.ConnErrors, r.LockedKeys, secs(r.LongestLocked))
}

func (r FaultResult) refName() string {
	if r.LeaseExpiry.IsZero() {
		return "the fault"
	}
	return fmt.Sprintf("the lease running out %s after the fault", secs(r.LeaseExpiry.Sub(r.At)))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// total500 counts every attempt of the run answered 500, and by status and
// code every 5xx answer but 503.
func (h *HA) total500() (n int, byCode map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	byCode = map[string]int{}
	for _, a := range h.atts {
		if !a.err && a.status >= 500 && a.status != http.StatusServiceUnavailable {
			if a.status == http.StatusInternalServerError {
				n++
			}
			byCode[strconv.Itoa(a.status)+" "+a.code]++
		}
	}
	return n, byCode
}

func (h *HA) total503() (unavailable, other int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.atts {
		if a.status == http.StatusServiceUnavailable {
			if a.code == "service_unavailable" {
				unavailable++
			} else {
				other++
			}
		}
	}
	return unavailable, other
}
