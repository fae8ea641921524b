// Command bigrepo generates, deterministically, a git repository of
// realistic size for measuring launch → workspace ready (scripts/launchbench,
// docs/BENCHMARKS.md "Launch on a large repository"): by default 100,000
// commits on main over a tree of about 3,000 source files in nested
// folders, each commit a small text edit of one to three files (a hot set
// edited far more often than the rest), and every 200th commit adding or
// rewriting a larger generated data file (256 KiB to 1 MiB), which is what
// takes the pack to a few hundred MB (the 100,000-commit repository packs
// to about 520 MB). It writes the history through one
// `git fast-import` stream, which is fast, into a bare repository.
//
//	go run ./scripts/bigrepo                        # .bigrepo/repo-100000.git, made once per machine
//	go run ./scripts/bigrepo --commits 2000 --out /tmp/small.git
//
// The result is cached: a repository whose marker file records the same
// parameters is left as it is, so only the first run on a machine pays.
// The same flags give the same commits (the same ids) on every machine.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	var (
		commits = flag.Int("commits", 100000, "commits on main")
		files   = flag.Int("files", 3000, "source files in the first commit")
		out     = flag.String("out", "", "bare repository to make (default .bigrepo/repo-<commits>.git)")
		seed    = flag.Uint64("seed", 15, "seed of every choice: the same seed gives the same repository")
		quiet   = flag.Bool("q", false, "no progress line")
	)
	flag.Parse()
	if *out == "" {
		*out = filepath.Join(".bigrepo", fmt.Sprintf("repo-%d.git", *commits))
	}
	if err := run(*out, *commits, *files, *seed, !*quiet); err != nil {
		fmt.Fprintln(os.Stderr, "bigrepo:", err)
		os.Exit(1)
	}
}

// largeEvery is how often (in commits) a large data file is added or
// rewritten: with 100,000 commits, 500 versions of 256 KiB to 1 MiB, which
// is most of the packed size.
const largeEvery = 200

// version changes whenever the generator makes another history from the
// same flags, so that a cached repository of an older one is not reused.
const version = 2

// markerName records, in the finished repository, the parameters it was
// made with; its absence means an unfinished run.
const markerName = "galley-bigrepo"

func run(out string, commits, nfiles int, seed uint64, progress bool) error {
	want := fmt.Sprintf("version=%d commits=%d files=%d seed=%d\n", version, commits, nfiles, seed)
	if got, err := os.ReadFile(filepath.Join(out, markerName)); err == nil {
		if string(got) == want {
			fmt.Printf("%s: cached (%s)\n", out, strings.TrimSpace(want))
			return nil
		}
		return fmt.Errorf("%s was made with other parameters (%s): remove it first", out, strings.TrimSpace(string(got)))
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	start := time.Now()
	if err := git("", "init", "--quiet", "--bare", "--initial-branch=main", tmp); err != nil {
		return err
	}
	cmd := exec.Command("git", "fast-import", "--quiet", "--done")
	cmd.Dir = tmp
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdin, 1<<20)
	g := newGen(seed, nfiles)
	werr := g.write(w, commits, progress)
	if werr == nil {
		werr = w.Flush()
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil || werr != nil {
		return fmt.Errorf("fast-import: %v %v", werr, err)
	}
	imported := time.Since(start)
	// One pack with good deltas, as a house repository that has been
	// gc'd has; fast-import's own pack deltas each blob against its
	// previous version only.
	if progress {
		fmt.Fprintf(os.Stderr, "\rimported in %s; repacking...            \n", imported.Round(time.Second))
	}
	if err := git(tmp, "repack", "-a", "-d", "-q", "--window=10", "--depth=50"); err != nil {
		return err
	}
	if err := git(tmp, "commit-graph", "write", "--reachable"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, markerName), []byte(want), 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	size, _ := packSize(out)
	fmt.Printf("%s: %d commits, %d files at first, pack %.0f MB; generated in %s (fast-import %s)\n",
		out, commits, nfiles, float64(size)/1e6, time.Since(start).Round(time.Second), imported.Round(time.Second))
	return nil
}

func git(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func packSize(repo string) (int64, error) {
	var n int64
	matches, err := filepath.Glob(filepath.Join(repo, "objects", "pack", "*.pack"))
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil {
			n += fi.Size()
		}
	}
	return n, err
}

// gen holds the tree as it stands and the one source of randomness.
type gen struct {
	r     *rand.Rand
	paths []string
	lines [][]string // by index into paths
	large []string   // the data files made so far
	hot   int        // paths[:hot] take most edits
}

var (
	dirWords  = []string{"api", "core", "store", "net", "auth", "billing", "search", "ui", "cmd", "internal", "util", "jobs", "metrics", "cache", "sync", "export", "report", "admin", "mail", "queue"}
	idents    = []string{"ctx", "req", "resp", "err", "buf", "n", "id", "key", "value", "item", "items", "user", "order", "total", "count", "limit", "offset", "name", "state", "cfg"}
	funcWords = []string{"Load", "Store", "Parse", "Render", "Fetch", "Apply", "Check", "Build", "Merge", "Split", "Encode", "Decode", "Open", "Close", "Flush", "Retry"}
	exts      = []string{".go", ".go", ".go", ".ts", ".py", ".md", ".yaml"}
)

func newGen(seed uint64, nfiles int) *gen {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	seen := map[string]bool{}
	for len(g.paths) < nfiles {
		d := dirWords[g.r.IntN(len(dirWords))] + "/" + dirWords[g.r.IntN(len(dirWords))]
		if g.r.IntN(3) == 0 {
			d += "/" + dirWords[g.r.IntN(len(dirWords))]
		}
		p := fmt.Sprintf("%s/%s%s%d%s", d, strings.ToLower(funcWords[g.r.IntN(len(funcWords))]), idents[g.r.IntN(len(idents))], g.r.IntN(1000), exts[g.r.IntN(len(exts))])
		if seen[p] {
			continue
		}
		seen[p] = true
		n := 20 + g.r.IntN(180) // 1 to 8 KB
		ls := make([]string, n)
		for i := range ls {
			ls[i] = g.line()
		}
		g.paths = append(g.paths, p)
		g.lines = append(g.lines, ls)
	}
	g.hot = nfiles / 20
	return g
}

// line is one line of plausible source: identifiers, calls and a number,
// which compresses as source does (about 3:1), not as a repeated string.
func (g *gen) line() string {
	r := g.r
	switch r.IntN(5) {
	case 0:
		return fmt.Sprintf("\t%s, err := %s%s(%s, %d)", idents[r.IntN(20)], funcWords[r.IntN(16)], funcWords[r.IntN(16)], idents[r.IntN(20)], r.IntN(100000))
	case 1:
		return fmt.Sprintf("\tif %s > %d { return %s.%s() }", idents[r.IntN(20)], r.IntN(5000), idents[r.IntN(20)], funcWords[r.IntN(16)])
	case 2:
		return fmt.Sprintf("// %s %s the %s when %s is 0x%08x", funcWords[r.IntN(16)], idents[r.IntN(20)], idents[r.IntN(20)], idents[r.IntN(20)], r.Uint32())
	case 3:
		return ""
	default:
		return fmt.Sprintf("\t%s.%s = append(%s.%s, %s{%q: %d})", idents[r.IntN(20)], idents[r.IntN(20)], idents[r.IntN(20)], idents[r.IntN(20)], funcWords[r.IntN(16)], idents[r.IntN(20)], r.IntN(1<<20))
	}
}

// pick returns a file to edit: nine edits in ten go to the hot twentieth.
func (g *gen) pick() int {
	if g.r.IntN(10) < 9 {
		return g.r.IntN(g.hot)
	}
	return g.r.IntN(len(g.paths))
}

// edit changes a few lines of file i: replace, insert or delete.
func (g *gen) edit(i int) {
	ls := g.lines[i]
	for k := 1 + g.r.IntN(4); k > 0; k-- {
		at := g.r.IntN(len(ls) + 1)
		// Files stay between 30 and 200 lines (1 to 8 KB): a file that
		// only grew would make the history far larger than its edits.
		switch op := g.r.IntN(10); {
		case op < 4 && at < len(ls):
			ls[at] = g.line()
		case (op < 7 && len(ls) < 200) || len(ls) < 30:
			ls = append(ls[:at], append([]string{g.line()}, ls[at:]...)...)
		case at < len(ls):
			ls = append(ls[:at], ls[at+1:]...)
		}
	}
	g.lines[i] = ls
}

// largeFile is a generated data file of 256 KiB to 1 MiB: records of
// hex-encoded random values, which compress about 2:1 and delta poorly, as
// generated fixtures and vendored data do.
func (g *gen) largeFile() []byte {
	size := 256<<10 + g.r.IntN(768<<10)
	var b strings.Builder
	b.Grow(size + 128)
	for n := 0; b.Len() < size; n++ {
		fmt.Fprintf(&b, "{\"id\":%d,\"h\":\"%016x%016x\",\"v\":%d}\n", n, g.r.Uint64(), g.r.Uint64(), g.r.IntN(1e6))
	}
	return []byte(b.String())
}

func (g *gen) write(w io.Writer, commits int, progress bool) error {
	const t0 = 1_600_000_000
	start := time.Now()
	for c := 0; c < commits; c++ {
		when := t0 + int64(c)*600
		var msg string
		var changed []int
		var data []string
		var blob [][]byte
		switch {
		case c == 0:
			msg = "Initial import"
			for i := range g.paths {
				changed = append(changed, i)
			}
		case c%largeEvery == 0:
			var p string
			if len(g.large) < 40 || g.r.IntN(2) == 0 {
				p = fmt.Sprintf("testdata/fixtures/set%03d.jsonl", len(g.large))
				g.large = append(g.large, p)
			} else {
				p = g.large[g.r.IntN(len(g.large))]
			}
			msg = "Regenerate " + p
			data, blob = append(data, p), append(blob, g.largeFile())
		default:
			for k := 1 + g.r.IntN(3); k > 0; k-- {
				i := g.pick()
				g.edit(i)
				changed = append(changed, i)
			}
			msg = fmt.Sprintf("%s: %s %s in %s", strings.Split(g.paths[changed[0]], "/")[0], funcWords[g.r.IntN(16)], idents[g.r.IntN(20)], filepath.Base(g.paths[changed[0]]))
		}
		fmt.Fprintf(w, "commit refs/heads/main\nauthor Bench Author <bench@galley.invalid> %d +0000\ncommitter Bench Author <bench@galley.invalid> %d +0000\ndata %d\n%s\n", when, when, len(msg), msg)
		for _, i := range changed {
			content := strings.Join(g.lines[i], "\n") + "\n"
			fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n%s\n", g.paths[i], len(content), content)
		}
		for k, p := range data {
			fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", p, len(blob[k]))
			if _, err := w.Write(blob[k]); err != nil {
				return err
			}
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
		if progress && (c%1000 == 0 || c == commits-1) {
			el := time.Since(start)
			eta := time.Duration(float64(el) / float64(c+1) * float64(commits-c-1))
			fmt.Fprintf(os.Stderr, "\rcommit %d/%d, %s elapsed, about %s left   ", c+1, commits, el.Round(time.Second), eta.Round(time.Second))
		}
	}
	if progress {
		fmt.Fprintln(os.Stderr)
	}
	_, err := io.WriteString(w, "done\n")
	return err
}
