package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/modelproxy"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Parking (docs/parking.md): an agent that has waited on its coordinator
// for Config.ParkAfter, blocked in its one tool call, is parked. The
// harness saves its session files, freezes its inbox, reports the parking
// to galley and ends, without an exit report; galley starts a new harness
// when input comes, which restores the files and resumes the agent where
// it waited (resume.go).

// Parker is a Driver whose agent can be parked and resumed.
type Parker interface {
	// SessionDir names the folder, relative to the agent's home, that
	// holds the agent's session files (saved at parking, restored before
	// the resume), or "" for an agent that keeps none.
	SessionDir() string
	// ResumeCommand builds the command that resumes the agent from fact,
	// the last thing its driver told Events.Resumable; the rest is as
	// Command.
	ResumeCommand(self workerapi.Self, mcpURL, mcpSecret, workspace, fact string) (*exec.Cmd, error)
	// CheckResumeFact refuses a fact ResumeCommand would refuse. The
	// harness checks every fact when it is told (the agent's stream may
	// forge it), so that a bad one stops the parking rather than the
	// resumed worker.
	CheckResumeFact(fact string) error
}

// DefaultParkLimits bound a parking's session archive.
var DefaultParkLimits = snapshot.Limits{MaxBytes: 256 << 20, MaxEntries: 10_000}

// ParkKey is the key of a worker's session archive in the park store:
// galley deletes it once the worker settles (snapshot.Sessions).
func ParkKey(house, worker string) string { return snapshot.SessionKey(house, worker) }

// parkState is what a parked harness keeps for the harness that resumes it
// (workerapi.ParkRequest.State): opaque to galley, bounded by the API.
type parkState struct {
	V int `json:"v"`
	// Fact is the driver's resume fact (the scripted agent's line, a
	// CLI's session id).
	Fact string `json:"fact"`
	// Wait is the tool the agent waited in; Question and AskDigest name
	// the question of an ask_coordinator, so that the resumed agent's
	// same ask takes its reply instead of asking again.
	Wait      string `json:"wait"`
	Question  string `json:"question,omitempty"`
	AskDigest string `json:"askDigest,omitempty"`
	// From is where the resumed harness reads its inbox from: the
	// messages queued and not taken come back.
	From int64 `json:"from"`
	// Session is the session archive's key, "" when none was saved.
	Session string `json:"session,omitempty"`
	// Subject is the question's subject, cut to a line: a CLI resumed
	// with its reply as its prompt is told which question it answers.
	Subject string `json:"subject,omitempty"`
	// Usage is the model proxy's count at the parking: the resumed
	// harness's proxy counts on from it, so that usage reports stay
	// totals across the gap.
	Usage *modelproxy.Totals `json:"usage,omitempty"`
}

// askDigest identifies an ask by its subject and body.
func askDigest(subject, body string) string {
	sum := sha256.Sum256([]byte(subject + "\x00" + body))
	return hex.EncodeToString(sum[:])
}

// waiting is one blocking tool call of the agent's.
type waiting struct {
	tool      string
	question  string // an ask's question, once posted
	subject   string
	askDigest string
	since     time.Time
}

// parkWatch follows the agent's blocking calls and the driver's resume
// fact, and says when the agent may be parked.
type parkWatch struct {
	mu      sync.Mutex
	n       int
	waits   map[int]*waiting
	fact    string
	parking bool // a parking is under way (or done): calls are refused, an ask's end is not an abandon
	// notBefore delays the next try after one that failed.
	notBefore time.Time
}

func (p *parkWatch) wait(tool, question, subject, digest string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waits == nil {
		p.waits = map[int]*waiting{}
	}
	p.n++
	p.waits[p.n] = &waiting{tool: tool, question: question, subject: cutText(subject, maxAbandonedSubject), askDigest: digest, since: time.Now()}
	return p.n
}

func (p *parkWatch) done(id int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waits, id)
}

func (p *parkWatch) setFact(f string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fact = f
}

func (p *parkWatch) isParking() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parking
}

// candidate answers the one wait to park in, when the agent has waited in
// exactly one blocking call, and no other, for at least after, and its
// driver said where it is.
func (p *parkWatch) candidate(after time.Duration, calls int) (waiting, string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parking || len(p.waits) != 1 || calls != 1 || p.fact == "" || time.Now().Before(p.notBefore) {
		return waiting{}, "", false
	}
	for _, w := range p.waits {
		if time.Since(w.since) >= after && (w.tool != ToolAsk || w.question != "") {
			return *w, p.fact, true
		}
	}
	return waiting{}, "", false
}

// inFlight is the number of tool calls running.
func (l *liveRequests) inFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.callsInFlight
}

// watchPark tries to park the agent every second once it may be, until
// ctx ends or it is parked (h.parked closed).
func (h *harness) watchPark(ctx context.Context, parker Parker, j *jail) {
	if h.cfg.ParkAfter <= 0 {
		return
	}
	if parker.SessionDir() != "" && h.cfg.Parks == nil {
		h.log.Warn("parking is off: the agent keeps session files and no park store is set")
		return
	}
	if parker.SessionDir() != "" && j.mode == ConfineNone {
		// Its home is the operator's: its session folder may name
		// anything the operator's files hold, which a restore would give
		// to the agent.
		h.log.Warn("parking is off: the agent keeps session files and is not confined")
		return
	}
	tick := time.NewTicker(min(time.Second, h.cfg.ParkAfter/2))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if h.finishing.Load() || h.isSettled() {
			return
		}
		w, fact, ok := h.parks.candidate(h.cfg.ParkAfter, h.calls.inFlight())
		if !ok {
			continue
		}
		if h.park(ctx, parker, j, w, fact) {
			close(h.parked)
			return
		}
	}
}

// park parks the agent waiting in w: freeze, save, report. It answers
// true when the agent is to be stopped and nothing reported: the parking
// landed, galley settled the worker meanwhile, or whether it landed stays
// unknown (galley then settles the worker failed when its compute ends,
// unless it landed); on false the worker goes on as before and the
// parking is tried again after another ParkAfter.
func (h *harness) park(ctx context.Context, parker Parker, j *jail, w waiting, fact string) bool {
	h.parks.mu.Lock()
	h.parks.parking = true
	h.parks.mu.Unlock()
	giveUp := func(why string) bool {
		h.log.Info("the agent was not parked; it goes on", "reason", why)
		h.parks.mu.Lock()
		h.parks.parking = false
		h.parks.mu.Unlock()
		return false
	}
	failed := func(why string, err error) bool {
		msg := why
		if err != nil {
			msg += ": " + redactSecrets(err.Error(), h.secrets()...)
		}
		h.log.Warn("the agent was not parked; it goes on waiting", "reason", msg)
		h.rep.report(workerapi.EventError, "the worker was not parked: "+msg)
		h.parks.mu.Lock()
		h.parks.parking = false
		h.parks.notBefore = time.Now().Add(h.cfg.ParkAfter)
		h.parks.mu.Unlock()
		return false
	}
	// A tool call that started before parking was set is seen here (a
	// call counts itself before it looks at parking, tools.go).
	if h.calls.inFlight() != 1 {
		return giveUp("another tool call started")
	}
	n := 1
	if r := h.self.Resume; r != nil {
		n = r.Parking + 1
	}
	h.log.Info("parking the agent", "parking", n, "tool", w.tool, "question", w.question, "waited", time.Since(w.since).Round(time.Second))
	st := parkState{V: 1, Fact: fact, Wait: w.tool, Question: w.question, Subject: w.subject, AskDigest: w.askDigest}
	// 1. Freeze, in one step with the check that the agent still waits
	// and has taken nothing: from now on nothing reaches it, so nothing
	// it is given is lost with it.
	read, from, ok := h.box.freeze(w.question)
	if !ok {
		return giveUp("its input came, or its wait ended, as it parked")
	}
	st.From = from
	// 2. Save, while the agent is blocked in its call: a failure gives it
	// what came meanwhile.
	if dir := parker.SessionDir(); dir != "" {
		key := ParkKey(h.cfg.House, h.self.Handle)
		stats, saved, err := h.saveSession(ctx, j, dir, key)
		if err != nil {
			h.box.thaw()
			return failed("its session files could not be saved", err)
		}
		if saved {
			st.Session = key
			h.log.Info("session files saved", "files", stats.Files, "bytes", stats.Bytes)
		}
	}
	// The worktree, where it goes with the compute (a task's own
	// storage): the resumed harness restores it, so the parking needs it.
	worktreeSaved, err := h.saveWorktreeForPark(ctx)
	if err != nil {
		h.box.thaw()
		return failed("its worktree's snapshot could not be saved", err)
	}
	if !h.box.stillFrozenWait() {
		h.box.thaw()
		return giveUp("its wait ended as it parked")
	}
	// The model proxy's count, with every call the agent made counted
	// (it is blocked in its wait: none is in flight), reported now and
	// kept for the resumed proxy.
	st.Usage = h.model.parkCount()
	state, err := json.Marshal(st)
	if err != nil || len(state) > workerapi.MaxParkState {
		h.box.thaw()
		return failed("its state is too large", err)
	}
	// 3. Report. The call is idempotent. Once it is sent the parking may
	// have landed, and a landed parking may already be resumed by another
	// harness: the agent is given what the freeze held only on galley's
	// definite refusal.
	req := workerapi.ParkRequest{Parking: n, Read: read, State: state}
	err = h.untilReachable(ctx, "reporting the parking", 30*time.Second, func(ctx context.Context) error {
		return h.api.Park(ctx, req)
	})
	// Whatever ends the harness now, the end's save would only repeat
	// the parking's; an agent that goes on is saved at its end.
	h.saved.Store(worktreeSaved)
	switch {
	case err == nil:
	case galleyerr.Is(galleyerr.Conflict, err):
		h.log.Info("the worker settled as it parked", "err", err)
		return true
	case galleyerr.Is(galleyerr.Malformed, err) || galleyerr.Is(galleyerr.Invalid, err) || galleyerr.Is(galleyerr.TooLarge, err):
		h.box.thaw()
		h.saved.Store(false)
		return failed("galley refused the parking", err)
	case galleyerr.Is(galleyerr.Unauthorized, err):
		// This harness's credential is void: galley resumed the worker
		// from this parking (it landed, and its answer was lost).
		h.log.Info("the parking landed and the worker was resumed meanwhile; this harness ends", "parking", n)
		return true
	default:
		if landed, known := h.parkLanded(ctx, n); !landed {
			if known {
				h.log.Info("the worker settled as it parked")
				return true
			}
			// Neither landed nor refused: the agent stays frozen and
			// the harness ends without an exit report. If the parking
			// did not land, galley settles the worker failed when this
			// compute's end is seen; if it did, input resumes it.
			h.log.Warn("whether the parking landed is unknown; the agent is stopped and the harness ends without an exit report",
				"parking", n, "err", redactSecrets(err.Error(), h.secrets()...))
			return true
		}
	}
	h.log.Info("parked: the agent is stopped and the harness ends", "parking", n, "read", read)
	h.rep.report(workerapi.EventWorkspace, "parked", "parking", strconv.Itoa(n))
	return true
}

// parkLanded reads the worker's record to learn whether parking n landed
// after its report went unanswered: landed when it did (or the read is
// refused for a void credential: the worker was resumed from it); else
// known when the worker has settled.
func (h *harness) parkLanded(ctx context.Context, n int) (landed, settled bool) {
	var self workerapi.Self
	err := h.untilReachable(context.WithoutCancel(ctx), "reading whether the parking landed", SelfPatience, func(ctx context.Context) (err error) {
		self, err = h.api.Self(ctx)
		return err
	})
	switch {
	case galleyerr.Is(galleyerr.Unauthorized, err):
		return true, false
	case err != nil:
		return false, false
	case self.Parked >= n:
		return true, false
	}
	return false, self.State == protocol.StateSettled
}

// saveSession saves the agent's session folder dir (Parker.SessionDir)
// under key in the park store; saved is false when the folder does not
// exist. The folder is the agent's: it is opened one component at a time
// without following a link (openSessionDir) and saved through that open
// folder, so the agent cannot make the harness archive, and the resume
// hand it, what it cannot read.
func (h *harness) saveSession(ctx context.Context, j *jail, dir, key string) (snapshot.Stats, bool, error) {
	f, err := openSessionDir(j, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return snapshot.Stats{}, false, nil
	}
	if err != nil {
		return snapshot.Stats{}, false, err
	}
	defer f.Close()
	sctx, cancel := context.WithTimeout(ctx, snapshotPatience)
	defer cancel()
	// The open folder itself, not its path again.
	stats, err := snapshot.SaveTo(sctx, h.cfg.Parks, key, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), h.parkLimits())
	return stats, err == nil, err
}

// errSessionLink refuses a session folder reached through a link.
var errSessionLink = errors.New("the agent's session folder is reached through a symbolic link, which is not followed")

// openSessionDir opens the agent's session folder (sessionPath) one
// component at a time through os.Roots: from the folder that holds the
// jail's (the harness's temporary folder) for a folder in the agent's
// home, from / for an absolute one. A link at any component is refused,
// each component opened is checked to be the one described (a link
// swapped in meanwhile is refused too), and the folder must be the
// agent's uid's. A missing component is fs.ErrNotExist.
func openSessionDir(j *jail, dir string) (*os.File, error) {
	var start string
	var parts []string
	if filepath.IsAbs(dir) {
		start, parts = "/", strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/")
	} else {
		if j.base == "" || !filepath.IsLocal(dir) {
			return nil, errors.New("the agent's session folder is not in its home")
		}
		start = filepath.Dir(j.base)
		parts = append([]string{filepath.Base(j.base), filepath.Base(j.home)}, strings.Split(filepath.Clean(dir), "/")...)
	}
	root, err := os.OpenRoot(start)
	if err != nil {
		return nil, err
	}
	var last fs.FileInfo
	for _, part := range parts {
		if part == "" {
			continue
		}
		fi, err := root.Lstat(part)
		if err != nil {
			root.Close()
			return nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			root.Close()
			return nil, errSessionLink
		}
		if !fi.IsDir() {
			root.Close()
			return nil, errors.New("the agent's session folder's path holds something other than a folder")
		}
		next, err := root.OpenRoot(part)
		root.Close()
		if err != nil {
			return nil, err
		}
		if now, err := next.Stat("."); err != nil || !os.SameFile(fi, now) {
			next.Close()
			return nil, errSessionLink
		}
		root, last = next, fi
	}
	defer root.Close()
	uid := j.uid
	if j.mode != ConfineUser {
		uid = os.Geteuid() // under Landlock the agent runs as the harness
	}
	if st, ok := last.Sys().(*syscall.Stat_t); last == nil || !ok || int(st.Uid) != uid {
		return nil, errors.New("the agent's session folder is not its own (it is owned by another uid)")
	}
	f, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	if now, err := f.Stat(); err != nil || !os.SameFile(last, now) {
		f.Close()
		return nil, errSessionLink
	}
	return f, nil
}

func (h *harness) parkLimits() snapshot.Limits {
	l := h.cfg.ParkLimits
	if l.MaxBytes == 0 {
		l.MaxBytes = DefaultParkLimits.MaxBytes
	}
	if l.MaxEntries == 0 {
		l.MaxEntries = DefaultParkLimits.MaxEntries
	}
	return l
}

// sessionPath is where a driver's session folder is: dir itself when
// absolute (the CLI's configuration folder named in the environment),
// else dir in the agent's home.
func sessionPath(j *jail, dir string) string {
	if filepath.IsAbs(dir) {
		return filepath.Clean(dir)
	}
	return filepath.Join(agentHome(j), dir)
}

// agentHome is the agent's home: the jail's, or the harness's own for an
// agent run unconfined.
func agentHome(j *jail) string {
	if j != nil && j.home != "" {
		return j.home
	}
	home, _ := os.UserHomeDir()
	return home
}
