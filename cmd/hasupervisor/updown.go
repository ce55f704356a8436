package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// upTimeout bounds the wait for the formation's first commit: etcd, an
// initdb, two base backups, Patroni's first loops.
const upTimeout = 4 * time.Minute

// up starts the supervisor in the background and waits until the formation
// takes writes through haproxy, then prints the DATABASE_URL.
func up(cfg config) error {
	if pid := alivePID(cfg.supervisorPID()); pid > 0 {
		if f, err := readFormation(cfg); err == nil {
			fmt.Printf("the formation already runs (supervisor pid %d)\nDATABASE_URL=%s\n", pid, f.DatabaseURL)
			return nil
		}
		return fmt.Errorf("a supervisor (pid %d) is starting the formation already; make ha-down to stop it", pid)
	}
	for _, p := range cfg.allPorts() {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return fmt.Errorf("port %d is taken (a formation left running? make ha-down; or set HA_PORT_BASE): %v", p, err)
		}
		ln.Close()
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(cfg.formationPath())
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(cfg.supervisorLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, "run")
	cmd.Env = append(os.Environ(), "HA_DIR="+cfg.Dir, "HA_PORT_BASE="+strconv.Itoa(cfg.PortBase), "HA_TEMPLATES="+mustAbs(cfg.Templates))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // it outlives make ha
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("hasupervisor: starting the formation in %s (supervisor pid %d, log %s)\n", cfg.Dir, cmd.Process.Pid, cfg.supervisorLog())
	deadline := time.After(upTimeout)
	for {
		if f, err := readFormation(cfg); err == nil && f.DatabaseURL != "" {
			fmt.Printf("the formation takes writes through haproxy on 127.0.0.1:%d (stats: %s)\nDATABASE_URL=%s\n",
				f.HAProxy.Port, f.StatsURL, f.DatabaseURL)
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the supervisor ended (%v) before the formation took writes; its log:\n%s", err, tailFile(cfg.supervisorLog(), 20))
		case <-deadline:
			return fmt.Errorf("no primary took writes within %v; make ha-down, and see %s and %s/log", upTimeout, cfg.supervisorLog(), cfg.Dir)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// down stops the supervisor, which stops the formation; whatever it left
// (a supervisor killed with -9 stops nothing) is stopped by the PIDs in
// formation.json.
func down(cfg config) error {
	f, ferr := readFormation(cfg)
	if pid := alivePID(cfg.supervisorPID()); pid > 0 {
		fmt.Printf("hasupervisor: stopping the supervisor (pid %d) and the formation\n", pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) && processAlive(pid) {
			time.Sleep(200 * time.Millisecond)
		}
		if processAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if ferr == nil {
		var pids []int
		pids = append(pids, f.HAProxy.PID)
		for _, n := range f.Nodes {
			pids = append(pids, n.PatroniPID, n.PostgresPID)
		}
		for _, e := range f.Etcd {
			pids = append(pids, e.PID)
		}
		for _, pid := range pids {
			if pid > 0 && processAlive(pid) {
				fmt.Printf("hasupervisor: pid %d outlived the supervisor; killing it\n", pid)
				_ = syscall.Kill(pid, syscall.SIGCONT)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = os.Remove(cfg.formationPath())
	_ = os.Remove(cfg.supervisorPID())
	fmt.Println("hasupervisor: the formation is down (its data stays in " + cfg.Dir + "; remove it for a fresh one)")
	return nil
}

func readFormation(cfg config) (Formation, error) {
	var f Formation
	b, err := os.ReadFile(cfg.formationPath())
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(b, &f)
}

// alivePID is the PID in a pid file if that process lives, else 0.
func alivePID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !processAlive(pid) {
		return 0
	}
	return pid
}

// processAlive: the process exists and is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st := string(stat)
	i := strings.LastIndexByte(st, ')')
	return i >= 0 && i+2 < len(st) && st[i+2] != 'Z'
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func mustAbs(p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	return wd + "/" + p
}
