// Command testprogress turns `go test -json` on its standard input into a
// short report for people, as `make test` runs: one line per package as it
// finishes, with its time; the whole output of every failing package (and of
// every build failure), in full, as `go test` would have printed it; a line
// every minute naming the packages still running; and a summary. It exits 1
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

// stillRunningEvery is how often the packages still running are named.
const stillRunningEvery = time.Minute

func main() {
	os.Exit(report(os.Stdin, os.Stdout, stillRunningEvery))
}

type progress struct {
	mu      sync.Mutex
	out     io.Writer
	start   time.Time
	output  map[string]*strings.Builder // a package's output, kept until it ends
	running map[string]time.Time
	build   map[string]*strings.Builder // build output, by import path
	passed  int
	failed  []string
}

func report(in io.Reader, out io.Writer, every time.Duration) int {
	p := &progress{out: out, start: time.Now(), output: map[string]*strings.Builder{},
		running: map[string]time.Time{}, build: map[string]*strings.Builder{}}
	done := make(chan struct{})
	go p.tick(every, done)
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
		p.running[e.Package] = time.Now()
	case e.Action == "output":
		b.WriteString(e.Output)
	case e.Test != "":
		// A test's own end: its lines are in the package's output already.
	case e.Action == "pass" || e.Action == "skip":
		delete(p.running, e.Package)
		p.passed++
		fmt.Fprintf(p.out, "ok   %-60s %6.1fs   (%s in all)\n", e.Package, e.Elapsed, since(p.start))
		delete(p.output, e.Package)
	case e.Action == "fail":
		delete(p.running, e.Package)
		p.failed = append(p.failed, e.Package)
		fmt.Fprintf(p.out, "FAIL %-60s %6.1fs   (%s in all)\n", e.Package, e.Elapsed, since(p.start))
		fmt.Fprintf(p.out, "--- output of %s ---\n%s--- end of %s ---\n", e.Package, b, e.Package)
		delete(p.output, e.Package)
	}
}

func (p *progress) tick(every time.Duration, done <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p.mu.Lock()
		var names []string
		for pkg, started := range p.running {
			names = append(names, fmt.Sprintf("%s (%s)", pkg, since(started)))
		}
		slices.Sort(names)
		if len(names) > 0 {
			fmt.Fprintf(p.out, "...  %s in all; still running: %s\n", since(p.start), strings.Join(names, ", "))
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
		fmt.Fprintf(p.out, "FAIL: %d package(s) passed, %d failed in %s: %s\n", p.passed, len(p.failed), since(p.start), strings.Join(p.failed, ", "))
		return 1
	}
	fmt.Fprintf(p.out, "PASS: %d packages in %s\n", p.passed, since(p.start))
	return 0
}

func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }
