// Command probe runs inside the container package's test containers and
// reports what the container gives it, one "key=value" line each.
package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: probe status|term|term-exit|orphan|orphan-child|exit N|write PATH [hold]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "status":
		status()
	case "term", "term-exit":
		term(os.Args[1] == "term-exit")
	case "orphan":
		orphan()
	case "orphan-child":
		// Starts a process that exits at once, and leaves it to PID 1.
		c := exec.Command("/probe", "exit", "0")
		if err := c.Start(); err != nil {
			fmt.Println("err=", err)
			os.Exit(1)
		}
		fmt.Println(c.Process.Pid)
	case "dial":
		// dial ADDR...: whether a TCP connection to each opens.
		for _, a := range os.Args[2:] {
			c, err := net.DialTimeout("tcp", a, 30*time.Second)
			if err != nil {
				fmt.Printf("dial:%s=closed\n", a)
				continue
			}
			c.Close()
			fmt.Printf("dial:%s=open\n", a)
		}
	case "exit":
		n, _ := strconv.Atoi(os.Args[2])
		os.Exit(n)
	case "write":
		if err := os.WriteFile(os.Args[2], []byte("x"), 0o644); err != nil {
			fmt.Println("write=error", err)
			os.Exit(1)
		}
		fi, _ := os.Stat(os.Args[2])
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Printf("write=ok uid=%d gid=%d\n", st.Uid, st.Gid)
		if len(os.Args) > 3 && os.Args[3] == "hold" {
			term(true) // stays, for the host to look at what it wrote
		}
	}
}

func status() {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && (k == "CapEff" || k == "CapBnd" || k == "Uid" || k == "Gid") {
			fmt.Printf("%s=%s\n", k, strings.Fields(v)[0])
		}
	}
	wd, _ := os.Getwd()
	fmt.Println("cwd=" + wd)
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		fmt.Println("env=" + strings.ReplaceAll(kv, "\n", `\n`))
	}
	for _, f := range []string{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes",
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max"} {
		if b, err := os.ReadFile(f); err == nil {
			fmt.Printf("cgroup:%s=%s\n", f, strings.TrimSpace(string(b)))
		}
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		fmt.Printf("nofile=%d:%d\n", rl.Cur, rl.Max)
	}
	fmt.Printf("pid=%d\n", os.Getpid())
	if err := os.WriteFile("/probe-rootfs-write", []byte("x"), 0o600); err != nil {
		fmt.Println("rootfs=readonly")
	} else {
		fmt.Println("rootfs=writable")
	}
}

func term(exit bool) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	fmt.Println("ready")
	for s := range c {
		fmt.Println("got", s)
		if exit {
			os.Exit(3)
		}
	}
}

// orphan leaves a grandchild that exits to PID 1 and reports whether
// something reaps it: "reaped" when its pid goes away, "zombie" when it
// stays a zombie of this process, PID 1, which reaps nothing.
func orphan() {
	out, err := exec.Command("/probe", "orphan-child").Output()
	if err != nil {
		fmt.Println("err=", err)
		os.Exit(1)
	}
	pid := strings.TrimSpace(string(out))
	for {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			fmt.Println("orphan=reaped")
			return
		}
		f := strings.Fields(string(b))
		if len(f) > 3 && f[2] == "Z" && os.Getpid() == 1 {
			fmt.Println("orphan=zombie")
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
