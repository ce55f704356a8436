// Command testprogress turns `go test -json` on its standard input into a
// short report for people, as `make test` runs: one line per package as it
// finishes, with its time; the whole output of every failing package (and of
// every build failure), in full, as `go test` would have printed it; a line
// every 20 s naming the packages still running or, while none runs, saying
// that go test is still building (go test -json is silent while it
// compiles, and a first -race build takes minutes); and a summary. It exits 1
// when any package failed or did not build, so `make test` fails with it
// (the Makefile also sets pipefail, for a `go test` that fails otherwise).
// Lines that are not JSON (go's own errors on stderr) are printed as they
// come.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (go doc test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail
}

// stillRunningEvery is how often a line says what is still going on: well
// under the 30 s that make test promises between two lines.
const stillRunningEvery = 20 * time.Second

func main() {
	t := time.NewTicker(stillRunningEvery)
	defer t.Stop()
	os.Exit(report(os.Stdin, os.Stdout, t.C, time.Now))
}

type progress struct {
	mu      sync.Mutex
	out     io.Writer
	now     func() time.Time
	start   time.Time
	started bool                        // a package's tests began
	output  map[string]*strings.Builder // a package's output, kept until it ends
	running map[string]time.Time
	build   map[string]*strings.Builder // build output, by import path
	passed  int
	failed  []string
}

// report reads go test -json from in and reports on out; each value from
// ticks prints what is still going on.
func report(in io.Reader, out io.Writer, ticks <-chan time.Time, now func() time.Time) int {
	p := &progress{out: out, now: now, start: now(), output: map[string]*strings.Builder{},
		running: map[string]time.Time{}, build: map[string]*strings.Builder{}}
	fmt.Fprintf(out, "...  go test builds the test binaries first (with -race, a first build compiles the standard library and "+
		"every module with the race detector: minutes); a line every %s until it is done\n", stillRunningEvery)
	done := make(chan struct{})
	ticking := make(chan struct{})
	go func() {
		defer close(ticking)
		p.tick(ticks, done)
	}()
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			p.print("%s\n", line)
			continue
		}
		p.handle(e)
	}
	close(done)
	<-ticking
	return p.summary(scanner.Err())
}

func (p *progress) handle(e event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Action {
	case "build-output":
		b := p.build[e.ImportPath]
		if b == nil {
			b = &strings.Builder{}
			p.build[e.ImportPath] = b
		}
		b.WriteString(e.Output)
		return
	case "build-fail":
		// The package's own "fail" follows, and counts it.
		fmt.Fprintf(p.out, "FAIL %s [build failed]\n%s", e.ImportPath, p.build[e.ImportPath])
		return
	}
	if e.Package == "" {
		return
	}
	b := p.output[e.Package]
	if b == nil {
		b = &strings.Builder{}
		p.output[e.Package] = b
	}
	switch {
	case e.Action == "start":
		p.running[e.Package] = p.now()
		p.started = true
	case e.Action == "output":
		b.WriteString(e.Output)
	case e.Test != "":
		// A test's own end: its lines are in the package's output already.
	case e.Action == "pass" || e.Action == "skip":
		delete(p.running, e.Package)
		p.passed++
		fmt.Fprintf(p.out, "ok   %-60s %6.1fs   (%s in all)\n", e.Package, e.Elapsed, p.since(p.start))
		delete(p.output, e.Package)
	case e.Action == "fail":
		delete(p.running, e.Package)
		p.failed = append(p.failed, e.Package)
		fmt.Fprintf(p.out, "FAIL %-60s %6.1fs   (%s in all)\n", e.Package, e.Elapsed, p.since(p.start))
		fmt.Fprintf(p.out, "--- output of %s ---\n%s--- end of %s ---\n", e.Package, b, e.Package)
		delete(p.output, e.Package)
	}
}

func (p *progress) tick(ticks <-chan time.Time, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-ticks:
		}
		p.mu.Lock()
		var names []string
		for pkg, started := range p.running {
			names = append(names, fmt.Sprintf("%s (%s)", pkg, p.since(started)))
		}
		slices.Sort(names)
		switch {
		case len(names) > 0:
			fmt.Fprintf(p.out, "...  %s in all; still running: %s\n", p.since(p.start), strings.Join(names, ", "))
		case !p.started:
			fmt.Fprintf(p.out, "...  %s in all; go test is still building: no package's tests have begun yet\n", p.since(p.start))
		default:
			fmt.Fprintf(p.out, "...  %s in all; %d package(s) done; go test is building the next test binaries\n",
				p.since(p.start), p.passed+len(p.failed))
		}
		p.mu.Unlock()
	}
}

func (p *progress) print(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format, args...)
}

func (p *progress) summary(readErr error) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if readErr != nil {
		fmt.Fprintf(p.out, "testprogress: reading go test's output: %v\n", readErr)
		return 1
	}
	// A package that started and never ended: go test was killed, or
	// crashed; what it printed is all there is.
	for pkg := range p.running {
		p.failed = append(p.failed, pkg+" (did not finish)")
		fmt.Fprintf(p.out, "--- output of %s (it did not finish) ---\n%s", pkg, p.output[pkg])
	}
	if len(p.failed) > 0 {
		fmt.Fprintf(p.out, "FAIL: %d package(s) passed, %d failed in %s: %s\n", p.passed, len(p.failed), p.since(p.start), strings.Join(p.failed, ", "))
		return 1
	}
	fmt.Fprintf(p.out, "PASS: %d packages in %s\n", p.passed, p.since(p.start))
	return 0
}

func (p *progress) since(t time.Time) string { return p.now().Sub(t).Round(time.Second).String() }
