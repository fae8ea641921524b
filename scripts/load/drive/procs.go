package drive

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Process classes. A deployment on this machine is several programs: the
// local server is one process, the aws-local stack a gateway (the galley
// process, which also serves the ECS stand-in's API), a Lambda Runtime
// Interface Emulator per function instance with the function under it, the
// worker tasks (the stand-in's init, the harness, the agent), DynamoDB
// Local and fauxqs. CPU is reported per class.
const (
	ClassGalley  = "galley"       // the server, or the aws-local gateway with the ECS stand-in
	ClassRIE     = "rie"          // aws-lambda-rie, one per function instance
	ClassWorkers = "worker-tasks" // worker processes: ECS stand-in init, harness, agent, git under them
	ClassDynamo  = "dynamodb-local"
	ClassFauxqs  = "fauxqs"
	ClassOther   = "other"
	// ClassFunction prefixes a Lambda function's class: "fn:effects".
	ClassFunction = "fn:"
)

// ProcCPU is what a set of process trees did over a window: CPU seconds by
// class, and how many processes of each class ran at its end.
type ProcCPU struct {
	Seconds float64            // the window
	CPU     map[string]float64 // CPU seconds by class
	Count   map[string]int     // processes by class at the end
	// Instances counts the Lambda emulators per function at the end.
	Instances map[string]int
}

// Cores is class's CPU over the window, in cores.
func (p ProcCPU) Cores(class string) float64 {
	if p.Seconds <= 0 {
		return 0
	}
	return p.CPU[class] / p.Seconds
}

// Total is the CPU seconds of every class.
func (p ProcCPU) Total() float64 {
	t := 0.0
	for _, v := range p.CPU {
		t += v
	}
	return t
}

// Classes are the classes that used CPU or ran, sorted.
func (p ProcCPU) Classes() []string {
	set := map[string]bool{}
	for k, v := range p.CPU {
		if v != 0 {
			set[k] = true
		}
	}
	for k := range p.Count {
		set[k] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// procSnap is the CPU every process of some trees used until one instant,
// by class.
type procSnap struct {
	at        time.Time
	cpu       map[string]float64
	count     map[string]int
	instances map[string]int
}

// snapProcs walks /proc for the trees rooted at roots. Each live process
// counts its own CPU time under its class, and the CPU of its children it
// reaped (cutime, cstime) under the class of what it runs. A process that
// ended between two snapshots moved its CPU into its parent's reaped
// children, so the difference of two snapshots is the trees' CPU in
// between, short-lived processes included, as long as each one's parent is
// in a tree and waits for it.
func snapProcs(roots []int) procSnap {
	s := procSnap{at: time.Now(), cpu: map[string]float64{}, count: map[string]int{}, instances: map[string]int{}}
	if len(roots) == 0 {
		return s
	}
	type proc struct {
		ppid        int
		own, reaped float64
	}
	procs := map[int]proc{}
	kids := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return s
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, own, reaped, ok := procStat(pid)
		if !ok {
			continue
		}
		procs[pid] = proc{ppid, own, reaped}
		kids[ppid] = append(kids[ppid], pid)
	}
	seen := map[int]bool{}
	queue := []int{}
	for _, r := range roots {
		if _, ok := procs[r]; ok && !seen[r] {
			seen[r] = true
			queue = append(queue, r)
		}
	}
	root := roots[0]
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		p := procs[pid]
		argv := cmdline(pid)
		class, reapedClass := classify(pid == root, argv)
		s.cpu[class] += p.own
		s.cpu[reapedClass] += p.reaped
		s.count[class]++
		if class == ClassRIE && len(argv) > 0 {
			s.instances[functionOf(argv[len(argv)-1])]++
		}
		for _, k := range kids[pid] {
			if !seen[k] {
				seen[k] = true
				queue = append(queue, k)
			}
		}
	}
	return s
}

// since is the CPU the trees used from then to s.
func (s procSnap) since(then procSnap) ProcCPU {
	p := ProcCPU{Seconds: s.at.Sub(then.at).Seconds(), CPU: map[string]float64{}, Count: s.count, Instances: s.instances}
	for k, v := range s.cpu {
		p.CPU[k] = v - then.cpu[k]
	}
	for k, v := range then.cpu {
		if _, ok := s.cpu[k]; !ok {
			p.CPU[k] = -v
		}
	}
	return p
}

// classify names the class of a process running argv, and the class its
// reaped children's CPU goes to. root is the server (first root).
func classify(root bool, argv []string) (class, reaped string) {
	if len(argv) == 0 {
		return ClassOther, ClassOther
	}
	base := filepath.Base(argv[0])
	joined := strings.Join(argv, " ")
	switch {
	case base == "aws-lambda-rie":
		// Its child is the function; a function that exits is reaped here.
		return ClassRIE, ClassFunction + functionOf(argv[len(argv)-1])
	case base == "bootstrap":
		fn := ClassFunction + functionOf(argv[0])
		return fn, fn
	case base == "ecs-standin" || base == "galley-worker":
		return ClassWorkers, ClassWorkers
	case strings.Contains(joined, "DynamoDBLocal"):
		return ClassDynamo, ClassDynamo
	case strings.Contains(joined, "fauxqs"):
		return ClassFauxqs, ClassFauxqs
	case root:
		// The galley process reaps the worker tasks it started (the local
		// runtime, or the ECS stand-in's); the emulators never end while
		// it serves.
		return ClassGalley, ClassWorkers
	case base == "git" || strings.HasPrefix(base, "git-"):
		return ClassWorkers, ClassWorkers
	}
	return ClassOther, ClassOther
}

// functionOf is the function a bootstrap path belongs to:
// .../lambda-local/<function>/bootstrap.
func functionOf(bootstrap string) string {
	return filepath.Base(filepath.Dir(bootstrap))
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// procStat reads a process's parent, its own CPU time and that of the
// children it reaped, in seconds.
func procStat(pid int) (ppid int, own, reaped float64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	// After the command: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime ...
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	num := func(s string) float64 { x, _ := strconv.ParseFloat(s, 64); return x }
	return ppid, (num(f[11]) + num(f[12])) / clockTicks, (num(f[13]) + num(f[14])) / clockTicks, true
}

// PrintProcs writes the CPU by class over a window, in cores and in
// microseconds per call when calls > 0, and the emulator instances.
func PrintProcs(w io.Writer, p ProcCPU, calls int, self float64) {
	if p.Seconds <= 0 {
		return
	}
	fmt.Fprintf(w, "  %-18s %6s %8s %10s\n", "process class", "procs", "cores", "µs/call")
	row := func(name string, n int, cpu float64) {
		per := "-"
		if calls > 0 {
			per = fmt.Sprintf("%.0f", 1e6*cpu/float64(calls))
		}
		fmt.Fprintf(w, "  %-18s %6d %8.2f %10s\n", name, n, cpu/p.Seconds, per)
	}
	for _, c := range p.Classes() {
		row(c, p.Count[c], p.CPU[c])
	}
	row("load generator", 1, self)
	row("all above", 0, p.Total()+self)
	if len(p.Instances) > 0 {
		var parts []string
		for _, fn := range slices.Sorted(maps.Keys(p.Instances)) {
			parts = append(parts, fmt.Sprintf("%s %d", fn, p.Instances[fn]))
		}
		fmt.Fprintf(w, "  emulator instances: %s\n", strings.Join(parts, ", "))
	}
}

// procRoots is the server, then the other trees, without zeros.
func procRoots(server int, more []int) []int {
	var roots []int
	if server > 0 {
		roots = append(roots, server)
	}
	for _, p := range more {
		if p > 0 {
			roots = append(roots, p)
		}
	}
	return roots
}
