package boltstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
)

// The child process of TestKill: it writes until it is killed, printing an
// "ack" line after each write the store acknowledged.
const (
	killChildEnv = "GALLEY_BOLTSTORE_KILL_CHILD" // the store file
	killRoundEnv = "GALLEY_BOLTSTORE_KILL_ROUND"
)

func TestKillChild(t *testing.T) {
	path := os.Getenv(killChildEnv)
	if path == "" {
		t.Skip("helper process of TestKill")
	}
	round := os.Getenv(killRoundEnv)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	s, err := boltstore.Open(path)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	_, mv, err := s.GetMailbox(ctx, "run")
	if err != nil {
		fail(err)
	}
	// Bounded, in case nobody kills it; a dead parent's closed pipe kills it
	// sooner (SIGPIPE).
	for i := range 20000 {
		id := fmt.Sprintf("r%s-m%d", round, i)
		seq, _, err := s.AppendMessage(ctx, "run", store.Message{Row: protocol.MailMessage{ID: id, Kind: protocol.MsgStatus}})
		if err != nil {
			fail(err)
		}
		fmt.Printf("ack message %d %s\n", seq, id) // one write(2): a line is whole or absent
		key := fmt.Sprintf("r%s-e%d", round, i)
		v, err := s.PutEffect(ctx, store.Effect{Key: key, State: store.EffectApplied, Receipt: []byte(`{"i": ` + fmt.Sprint(i) + `}`)}, store.NoVersion)
		if err != nil {
			fail(err)
		}
		fmt.Printf("ack effect %s %d\n", key, v)
		mv, err = s.PutMailbox(ctx, store.Mailbox{Run: "run", Acked: int64(i)}, mv)
		if err != nil {
			fail(err)
		}
		fmt.Printf("ack mailbox %d\n", mv)
	}
}

// TestKill SIGKILLs a process that is writing to the store, at a point it
// does not choose, three times over, and checks after each kill that every
// write the process had acknowledged is in the file, with no gap in the
// message ledger.
func TestKill(t *testing.T) {
	if os.Getenv(killChildEnv) != "" {
		t.Skip("in the child")
	}
	path := filepath.Join(t.TempDir(), "galley.db")
	messages := map[int64]string{}
	effects := map[string]store.Version{}
	var maxSeq int64
	var mailboxV store.Version
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+path, fmt.Sprint(killRoundEnv, "=", round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAt := 150 + 101*round // acknowledged writes before the kill
		acks := 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 || f[0] != "ack" {
				continue
			}
			switch f[1] {
			case "message":
				var seq int64
				fmt.Sscan(f[2], &seq)
				messages[seq], maxSeq = f[3], max(maxSeq, seq)
			case "effect":
				var v store.Version
				fmt.Sscan(f[3], &v)
				effects[f[2]] = v
			case "mailbox":
				fmt.Sscan(f[2], &mailboxV)
			}
			// Lines after the kill were acknowledged before it: keep
			// reading them until the pipe closes.
			if acks++; acks == killAt {
				cmd.Process.Kill()
			}
		}
		err = cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v after %d acknowledged writes, not by our kill: %s", round, err, acks, stderr.String())
		}

		s, err := boltstore.Open(path)
		if err != nil {
			t.Fatalf("round %d: reopen after the kill: %v", round, err)
		}
		ctx := t.Context()
		ms, err := s.ListMessages(ctx, "run", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(ms)) < maxSeq {
			t.Errorf("round %d: %d messages after the kill, %d were acknowledged", round, len(ms), maxSeq)
		}
		for i, m := range ms {
			if m.Seq != int64(i+1) {
				t.Fatalf("round %d: message %d has sequence %d", round, i+1, m.Seq)
			}
			if id, ok := messages[m.Seq]; ok && m.Row.ID != id {
				t.Errorf("round %d: sequence %d holds %s, %s was acknowledged", round, m.Seq, m.Row.ID, id)
			}
		}
		for key, v := range effects {
			if _, got, err := s.GetEffect(ctx, key); err != nil || got != v {
				t.Errorf("round %d: acknowledged effect %s at version %d: got version %d, %v", round, key, v, got, err)
			}
		}
		// The child may have committed one more head than it printed.
		if _, v, err := s.GetMailbox(ctx, "run"); err != nil || v < mailboxV {
			t.Errorf("round %d: mailbox at version %d (%v), %d was acknowledged", round, v, err, mailboxV)
		}
		s.Close()
		t.Logf("round %d: killed after %d acknowledged writes; %d messages, %d effects kept", round, acks, len(ms), len(effects))
	}
}
