package gitserve_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/gitserve"
)

// A push flood (issue 21, item 6): force-pushes of fresh random content to
// the worker's own branch are refused once a push is over the per-push
// budget or the pushes together over the total, with a reason git shows;
// the pushes accepted before stay, and the house repository grows by no
// more than the budget.
func TestPushBudget(t *testing.T) {
	const branch = "kitchen/flood"
	const perPush, total = 2 << 20, 3 << 20
	h := newHouse(t)
	houseURL, houseUser, housePass := served(t, h)
	var tok atomic.Value
	tok.Store(housePass)
	budget := gitserve.NewBudget(perPush, total)
	user, session := "agent", secret(t)
	srv := httptest.NewServer(gitserve.BasicAuth("gate", gitserve.Credential(user, session),
		gitserve.BudgetedPushGate(gitserve.OnlyBranch(branch), budget, upstreamOf(t, houseURL, houseUser, &tok))))
	t.Cleanup(srv.Close)
	url := srv.URL + "/house.git"
	dir := filepath.Join(t.TempDir(), "agent")
	must(t, "", user, session, "clone", "--quiet", url, dir)
	git := func(args ...string) string { t.Helper(); return must(t, dir, user, session, args...) }
	packBytes := func() int64 {
		t.Helper()
		for _, l := range strings.Split(must(t, h.dir, "", "", "count-objects", "-v"), "\n") {
			if v, ok := strings.CutPrefix(l, "size-pack: "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n << 10
			}
		}
		return 0
	}
	grown := packBytes()
	// commit replaces the branch's one commit with size fresh random bytes.
	commit := func(size int, first bool) {
		t.Helper()
		blob := make([]byte, size)
		rand.Read(blob)
		if err := os.WriteFile(filepath.Join(dir, "big.bin"), blob, 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "big.bin")
		if first {
			git("commit", "--quiet", "-m", "work")
		} else {
			git("commit", "--quiet", "--amend", "-m", "work")
		}
	}
	push := func() result {
		return gitAs(dir, user, session, "push", "--force", "origin", "HEAD:refs/heads/"+branch)
	}
	head := func() string { return must(t, h.dir, "", "", "rev-parse", "refs/heads/"+branch) }

	commit(1<<20, true) // the honest push
	if r := push(); r.err != nil {
		t.Fatalf("a push within the budget was refused: %s", r.stderr)
	}
	honest := git("rev-parse", "HEAD")
	refusedAs := func(what string) {
		t.Helper()
		r := push()
		if r.err == nil {
			t.Fatalf("%s was accepted", what)
		}
		if !strings.Contains(r.stderr, "[remote rejected]") || !strings.Contains(r.stderr, "push budget") {
			t.Fatalf("%s: git did not show the budget's refusal:\n%s", what, r.stderr)
		}
	}
	commit(perPush+(512<<10), false)
	refusedAs("a push over the per-push budget")
	if head() != honest {
		t.Fatal("a refused push moved the branch")
	}
	commit(3<<19, false) // 1.5 MiB: fits in one push and, with the first, in all
	if r := push(); r.err != nil {
		t.Fatalf("a push within the budget was refused: %s", r.stderr)
	}
	kept := git("rev-parse", "HEAD")
	commit(1<<20, false) // 1 MiB more is over the 3 MiB in all
	refusedAs("a push over the total budget")
	if head() != kept {
		t.Fatal("the last accepted push was lost")
	}
	if used := budget.Used(); used > total {
		t.Fatalf("budget used %d, over %d", used, total)
	}
	if g := packBytes() - grown; g > total+(256<<10) {
		t.Fatalf("the house repository grew by %d bytes, budget %d", g, total)
	}
}

// spooled sums the sizes of this process's open, unlinked files in dir:
// the gate's pack spools.
func spooled(t *testing.T, dir string) (bytes int64, files int) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		p := "/proc/self/fd/" + fd.Name()
		target, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(target, dir+"/") {
			continue
		}
		if st, err := os.Stat(p); err == nil {
			bytes += st.Size()
			files++
		}
	}
	return bytes, files
}

// rawPush is a receive-pack request written by hand on its own connection:
// headers declaring length bytes, the command that updates ref from old to
// new, and then whatever the test sends.
type rawPush struct {
	conn *net.TCPConn
	resp chan string // the answer, once the gate gives one: status and body
}

func startRawPush(t *testing.T, addr, user, pass, ref, old, new string, length int64) *rawPush {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cmds := pktLine(old+" "+new+" "+ref+"\x00report-status side-band-64k agent=flood\n") + "0000"
	head := "POST /house.git/git-receive-pack HTTP/1.1\r\nHost: gate\r\n" +
		"Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + "\r\n" +
		"Content-Type: application/x-git-receive-pack-request\r\n" +
		"Content-Length: " + strconv.FormatInt(length, 10) + "\r\n\r\n" + cmds
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	p := &rawPush{conn: c.(*net.TCPConn), resp: make(chan string, 1)}
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			p.resp <- "no answer: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		p.resp <- resp.Status + " " + string(b)
	}()
	return p
}

// answer closes the push's sending side and waits for the gate's answer.
func (p *rawPush) answer(t *testing.T) string {
	t.Helper()
	_ = p.conn.CloseWrite()
	select {
	case a := <-p.resp:
		return a
	case <-time.After(2 * time.Minute):
		t.Fatal("the gate gave no answer")
		return ""
	}
}

// pushTarget is a gate in front of a fresh house, with a budget, and an
// honest first push of first random bytes already through it.
type pushTarget struct {
	house          house
	budget         *gitserve.Budget
	addr, url      string
	user, session  string
	spool, agent   string
	branch, headID string
	pushes         atomic.Int32 // receive-pack requests that reached the gate
}

func newPushTarget(t *testing.T, perPush, total int64, first int, opts ...gitserve.GateOption) *pushTarget {
	t.Helper()
	pt := &pushTarget{house: newHouse(t), budget: gitserve.NewBudget(perPush, total), user: "agent", session: secret(t),
		spool: t.TempDir(), branch: "kitchen/flood"}
	opts = append([]gitserve.GateOption{gitserve.WithSpoolDir(pt.spool)}, opts...)
	gate := gitserve.BudgetedPushGate(gitserve.OnlyBranch(pt.branch), pt.budget, gitserve.Backend(pt.house.dir), opts...)
	srv := httptest.NewServer(gitserve.BasicAuth("gate", gitserve.Credential(pt.user, pt.session),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
				pt.pushes.Add(1)
			}
			gate.ServeHTTP(w, r)
		})))
	t.Cleanup(srv.Close)
	pt.addr, pt.url = srv.Listener.Addr().String(), srv.URL+"/house.git"
	pt.agent = commitRandom(t, pt.url, pt.user, pt.session, first)
	pt.push(t)
	return pt
}

// push force-pushes the agent's HEAD to its branch, which must succeed.
func (pt *pushTarget) push(t *testing.T) {
	t.Helper()
	must(t, pt.agent, pt.user, pt.session, "push", "--quiet", "--force", "origin", "HEAD:refs/heads/"+pt.branch)
	pt.headID = must(t, pt.agent, "", "", "rev-parse", "HEAD")
	if got := must(t, pt.house.dir, "", "", "rev-parse", "refs/heads/"+pt.branch); got != pt.headID {
		t.Fatalf("the honest push left %s at %s, want %s", pt.branch, got, pt.headID)
	}
}

// settled checks that no push holds anything any more.
func (pt *pushTarget) settled(t *testing.T, used int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for pt.budget.Held() != 0 || pt.budget.Used() != used {
		if time.Now().After(deadline) {
			t.Fatalf("after the flood the budget holds %d and has used %d, want 0 and %d", pt.budget.Held(), pt.budget.Used(), used)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for n, files := spooled(t, pt.spool); files != 0; n, files = spooled(t, pt.spool) {
		if time.Now().After(deadline) {
			t.Fatalf("after the flood %d spool files of %d bytes are still open", files, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPushFloodWithinBudget (issue 28, item 6): concurrent unfinished
// pushes, each declaring 100 MiB and sending a pack just under the
// per-push limit before stopping, hold on disk no more than the budget has
// left: each push reserves its room before its pack is read, spools no
// more than that, and pushes beyond those in flight are refused at once.
// Before, each spooled up to the room left for one push, so that eight of
// them held eight times the per-push limit. Every one is answered with a
// reason git shows, the budget is whole again once they end, and an
// honest push still succeeds.
func TestPushFloodWithinBudget(t *testing.T) {
	const perPush, total, pushes, flood = 4 << 20, 6 << 20, 3, 8
	pt := newPushTarget(t, perPush, total, 1<<20, gitserve.WithPushesInFlight(pushes), gitserve.WithRequestsInFlight(flood))
	used := pt.budget.Used()
	left := total - used
	if used <= 0 || left >= perPush+(2<<20) {
		t.Fatalf("the honest push used %d of the budget", used)
	}

	// A sampler reads the spools' size for as long as the flood lasts.
	var peak atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			n, _ := spooled(t, pt.spool)
			if n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	pack := make([]byte, perPush-1)
	rand.Read(pack)
	copy(pack, "PACK")
	var raws []*rawPush
	before := pt.pushes.Load()
	for i := 0; i < flood; i++ {
		p := startRawPush(t, pt.addr, pt.user, pt.session, "refs/heads/"+pt.branch, pt.headID, strings.Repeat(strconv.Itoa(i%9+1), 40), 100<<20)
		raws = append(raws, p)
		go p.conn.Write(pack) // until the gate stops reading: the pushes stall there
	}
	// The push that reserved the per-push limit spools its whole pack and
	// waits for the rest.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := spooled(t, pt.spool); n == perPush-1 && pt.budget.Held() == perPush {
			break
		}
		if time.Now().After(deadline) {
			n, files := spooled(t, pt.spool)
			t.Fatalf("no push spooled its pack: %d bytes in %d files, %d held", n, files, pt.budget.Held())
		}
	}
	// Once every push is in flight (each stays until the test ends it),
	// so is every request the gate takes at once: another is answered 429.
	for deadline := time.Now().Add(time.Minute); pt.pushes.Load() < before+flood; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pushes reached the gate", pt.pushes.Load()-before, flood)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, pt.url+"/info/refs?service=git-receive-pack", nil)
		req.SetBasicAuth(pt.user, pt.session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if !strings.Contains(string(b), "at most 8 requests") {
				t.Errorf("a request beyond those in flight: %s", b)
			}
			break
		}
		if time.Now().After(deadline) {
			for i, p := range raws {
				select {
				case a := <-p.resp:
					t.Logf("push %d already answered: %.300q", i, a)
				default:
				}
			}
			t.Fatalf("a request beyond the %d pushes was answered %d", flood, resp.StatusCode)
		}
	}

	var busy, overBudget, cut int
	for _, p := range raws {
		a := p.answer(t)
		switch {
		case strings.Contains(a, "3 pushes in flight, the most its push gate takes at once"):
			busy++
		case strings.Contains(a, "over the worker's push budget"):
			overBudget++
		case strings.HasPrefix(a, "400 ") && strings.Contains(a, "ended before its declared length"):
			cut++
		default:
			t.Errorf("a flood push was answered %.300q", a)
		}
	}
	close(stop)
	<-sampled
	t.Logf("flood of %d pushes: %d refused as in flight, %d over the budget, %d cut; spools peaked at %d bytes with %d left in the budget",
		flood, busy, overBudget, cut, peak.Load(), left)
	if busy != flood-pushes || overBudget != pushes-1 || cut != 1 {
		t.Errorf("answers: %d in flight, %d over budget, %d cut; want %d, %d, 1", busy, overBudget, cut, flood-pushes, pushes-1)
	}
	if peak.Load() > left {
		t.Errorf("the spools held %d bytes at once, over the %d the budget had left", peak.Load(), left)
	}
	pt.settled(t, used)

	// An honest push goes through after the flood.
	must(t, pt.agent, "", "", "commit", "--quiet", "--allow-empty", "-m", "after the flood")
	pt.push(t)
}

// TestSlowPushIsCut: a push whose pack stops arriving is refused once the
// gate's body time is up, and its spool and reservation are dropped; so is
// a push whose commands trickle in; an honest push then succeeds.
func TestSlowPushIsCut(t *testing.T) {
	const limit = 3 * time.Second
	pt := newPushTarget(t, 4<<20, 16<<20, 16<<10, gitserve.WithBodyTimeout(limit))
	used := pt.budget.Used()

	p := startRawPush(t, pt.addr, pt.user, pt.session, "refs/heads/"+pt.branch, pt.headID, strings.Repeat("1", 40), 2<<20)
	if _, err := p.conn.Write(append([]byte("PACK"), make([]byte, 64<<10)...)); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-p.resp:
		if !strings.HasPrefix(a, "200 ") || !strings.Contains(a, "did not arrive within "+limit.String()) {
			t.Errorf("a stalled push was answered %.300q", a)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("a stalled push was never cut")
	}
	pt.settled(t, used)

	// Commands a byte at a time, slower than the limit allows.
	c, err := net.Dial("tcp", pt.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /house.git/git-receive-pack HTTP/1.1\r\nHost: gate\r\nAuthorization: Basic %s\r\nContent-Length: 1000\r\n\r\n",
		base64.StdEncoding.EncodeToString([]byte(pt.user+":"+pt.session)))
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answered <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answered <- resp.Status + " " + string(b)
	}()
	cmd := pktLine(pt.headID + " " + strings.Repeat("2", 40) + " refs/heads/" + pt.branch + "\x00report-status\n")
	var a string
trickle:
	for i := 0; ; i++ {
		select {
		case a = <-answered:
			break trickle
		case <-time.After(500 * time.Millisecond):
			if i < len(cmd) {
				c.Write([]byte{cmd[i]})
			}
		}
	}
	if !strings.HasPrefix(a, "408 ") || !strings.Contains(a, "did not arrive within") {
		t.Errorf("a trickled push was answered %.300q", a)
	}
	pt.settled(t, used)

	must(t, pt.agent, "", "", "commit", "--quiet", "--allow-empty", "-m", "after the slow ones")
	pt.push(t)
}

// TestFetchBodyBounded: a fetch's request body, which the house's backend
// spools to disk when it comes chunked, is refused past MaxFetchBody.
func TestFetchBodyBounded(t *testing.T) {
	pt := newPushTarget(t, 4<<20, 16<<20, 16<<10)
	body := io.MultiReader(strings.NewReader(pktLine("command=fetch\n")), io.LimitReader(zeros{}, gitserve.MaxFetchBody))
	req, _ := http.NewRequest(http.MethodPost, pt.url+"/git-upload-pack", struct{ io.Reader }{body}) // no length: chunked
	req.SetBasicAuth(pt.user, pt.session)
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a fetch body over %d bytes: %s", gitserve.MaxFetchBody, resp.Status)
	}
	// A fetch within bounds goes through.
	must(t, pt.agent, pt.user, pt.session, "fetch", "--quiet", "origin")
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
