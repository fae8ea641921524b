// Command fakeharness stands in for galley-worker in the ECS stand-in's
// tests and the ECS runtime's. It records each start and its whole
// environment in $GALLEY_WORKSPACE, then behaves as the last element of
// $GALLEY_BRANCH says:
//
//	run       runs until SIGTERM, then exits 0
//	exit      exits 0 at once
//	fail      exits 3 at once
//	stubborn  ignores SIGTERM, so only SIGKILL ends it
//	creds     resolves credentials with the AWS SDK's default chain, as a
//	          program in the task would, records them, and exits 0
//
// Its records: "starts" (one pid a line), "env-<pid>.json",
// "args-<pid>.json" (its arguments: a container override's command),
// "cwd-<pid>" (its working folder) and, in mode creds, "creds-<pid>.json".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
)

func main() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ws := os.Getenv("GALLEY_WORKSPACE")
	if ws == "" {
		fail(fmt.Errorf("GALLEY_WORKSPACE is unset"))
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		fail(err)
	}
	pid := strconv.Itoa(os.Getpid())
	b, _ := json.Marshal(os.Environ())
	if err := os.WriteFile(filepath.Join(ws, "env-"+pid+".json"), b, 0o600); err != nil {
		fail(err)
	}
	b, _ = json.Marshal(os.Args[1:])
	if err := os.WriteFile(filepath.Join(ws, "args-"+pid+".json"), b, 0o600); err != nil {
		fail(err)
	}
	cwd, _ := os.Getwd()
	if err := os.WriteFile(filepath.Join(ws, "cwd-"+pid), []byte(cwd), 0o600); err != nil {
		fail(err)
	}
	f, err := os.OpenFile(filepath.Join(ws, "starts"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fail(err)
	}
	fmt.Fprintln(f, pid)
	f.Close()
	fmt.Println("fakeharness started")

	switch mode := path.Base(os.Getenv("GALLEY_BRANCH")); mode {
	case "exit":
		return
	case "fail":
		os.Exit(3)
	case "run":
		<-term
	case "stubborn":
		for range term {
		}
	case "creds":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			fail(err)
		}
		c, err := cfg.Credentials.Retrieve(ctx)
		if err != nil {
			fail(err)
		}
		b, _ := json.Marshal(map[string]string{"AccessKeyID": c.AccessKeyID, "SecretAccessKey": c.SecretAccessKey,
			"SessionToken": c.SessionToken, "Source": c.Source, "Region": cfg.Region})
		if err := os.WriteFile(filepath.Join(ws, "creds-"+pid+".json"), b, 0o600); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fakeharness:", err)
	os.Exit(2)
}
