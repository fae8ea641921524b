package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/store"
)

// runOperator runs the operator commands: workers, events, cancel and
// revoke, against the operator API of a local server or a stack.
func runOperator(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("galley "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "http://127.0.0.1:8080", "the galley endpoint")
	tokenFile := fs.String("token-file", ".galley/private/operator-token", "the operator token file (the local server's by default)")
	asJSON := fs.Bool("json", false, "JSON output (events: one object per line)")
	var follow *bool
	var after *int64
	if cmd == "events" {
		follow = fs.Bool("follow", false, "keep following new events")
		after = fs.Int64("after", 0, "start after this event number")
	}
	// Flags may come after the handle.
	var handle string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		if handle != "" {
			fmt.Fprintf(stderr, "galley %s: one handle only\n", cmd)
			return 2
		}
		handle, rest = fs.Arg(0), fs.Args()[1:]
	}
	if cmd != "workers" && handle == "" {
		fmt.Fprintf(stderr, "usage: galley %s HANDLE [flags]\n", cmd)
		return 2
	}
	b, err := os.ReadFile(*tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "galley %s: the operator token: %v\n", cmd, err)
		return 1
	}
	c := operator.NewClient(*endpoint, strings.TrimSpace(string(b)))
	switch cmd {
	case "workers":
		ws, err := c.Workers(ctx)
		if err != nil {
			return failed(stderr, cmd, err)
		}
		if *asJSON {
			_ = json.NewEncoder(stdout).Encode(map[string]any{"workers": ws})
			return 0
		}
		printWorkers(stdout, ws)
	case "events":
		enc := json.NewEncoder(stdout)
		print := func(e store.Event) bool {
			if *asJSON {
				_ = enc.Encode(e)
			} else {
				fmt.Fprintln(stdout, eventLine(e))
			}
			return true
		}
		if *follow {
			if err := c.Follow(ctx, handle, *after, print); err != nil {
				return failed(stderr, cmd, err)
			}
			return 0
		}
		cur := *after
		for {
			a, err := c.Events(ctx, handle, cur, 0)
			if err != nil {
				return failed(stderr, cmd, err)
			}
			for _, e := range a.Events {
				print(e)
			}
			if len(a.Events) == 0 {
				return 0
			}
			cur = a.Next
		}
	case "cancel":
		if err := c.Cancel(ctx, handle); err != nil {
			return failed(stderr, cmd, err)
		}
		report(stdout, *asJSON, "cancelled", handle)
	case "revoke":
		if err := c.Revoke(ctx, handle); err != nil {
			return failed(stderr, cmd, err)
		}
		report(stdout, *asJSON, "revoked", handle)
	}
	return 0
}

func failed(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "galley %s: %v\n", cmd, err)
	return 1
}

func report(w io.Writer, asJSON bool, what, handle string) {
	if asJSON {
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "worker": handle, "action": what})
		return
	}
	fmt.Fprintf(w, "%s %s\n", what, handle)
}

func printWorkers(w io.Writer, ws []operator.WorkerView) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSTATE\tAGE\tAGENT\tBRANCH\tTOKENS\tCOST\tLAST EVENT")
	for _, v := range ws {
		state := v.State
		if v.Outcome != "" {
			state += " (" + v.Outcome + ")"
		}
		if v.Parked {
			state += ", parked"
			if v.ParkedSince != nil {
				state += " " + time.Since(*v.ParkedSince).Round(time.Second).String()
			}
		}
		agent := v.Agent
		if v.Model != "" {
			agent += " " + v.Model
		}
		tokens, cost, last := "-", "-", "-"
		if t := v.Tokens; t != nil && t.Input != nil && t.Output != nil {
			tokens = fmt.Sprintf("%d/%d", *t.Input, *t.Output)
		}
		if v.Cost != nil {
			cost = fmt.Sprintf("$%.4f", float64(v.Cost.MicroUSD)/1e6)
		}
		if e := v.LastEvent; e != nil {
			last = oneLine(e.Kind + " " + e.Text)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Handle, state,
			(time.Duration(v.AgeSeconds) * time.Second).String(), agent, v.Branch, tokens, cost, last)
	}
	tw.Flush()
}

// eventLine is one event as a line: number, time, kind, text, fields.
func eventLine(e store.Event) string {
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s %s", e.Seq, e.At.Format("15:04:05.000"), e.Kind)
	if e.Text != "" {
		b.WriteString(" " + e.Text)
	}
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, e.Fields[k])
	}
	return oneLine(b.String())
}

// oneLine keeps a terminal line one line: what an agent wrote may hold
// control characters.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
}
