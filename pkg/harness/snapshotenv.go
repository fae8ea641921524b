package harness

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/snapshot"
)

// snapshotsFromEnv makes the snapshot store the environment names, and
// its limits: an S3 bucket (contract.EnvSnapshotBucket), reached with the
// task role's credentials, or a folder (contract.EnvSnapshotDir); none
// when neither is set.
//
// It reads the SDK's configuration (the task's credentials endpoint, its
// region, AWS_ENDPOINT_URL_S3 and AWS_CA_BUNDLE) from this process's
// environment now: UnsetSecretEnv removes those variables once the
// Config is read.
func snapshotsFromEnv(getenv func(string) string) (SnapshotStore, snapshot.Limits, error) {
	var limits snapshot.Limits
	for _, l := range []struct {
		name string
		max  int64
		set  func(int64)
	}{
		{contract.EnvSnapshotMaxBytes, 1 << 62, func(n int64) { limits.MaxBytes = n }},
		{contract.EnvSnapshotMaxEntries, 1 << 31, func(n int64) { limits.MaxEntries = int(n) }},
	} {
		if s := strings.TrimSpace(getenv(l.name)); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 || n > l.max {
				return nil, limits, errors.New(l.name + " must be a positive whole number (at most " + strconv.FormatInt(l.max, 10) + ")")
			}
			l.set(n)
		}
	}
	bucket := strings.TrimSpace(getenv(contract.EnvSnapshotBucket))
	dir := strings.TrimSpace(getenv(contract.EnvSnapshotDir))
	switch {
	case bucket != "" && dir != "":
		return nil, limits, errors.New("set " + contract.EnvSnapshotBucket + " or " + contract.EnvSnapshotDir + ", not both")
	case dir != "":
		if !filepath.IsAbs(dir) {
			return nil, limits, errors.New(contract.EnvSnapshotDir + " must be an absolute path")
		}
		s, err := snapshot.NewDirStore(dir)
		if err != nil {
			return nil, limits, errors.New(contract.EnvSnapshotDir + ": " + err.Error())
		}
		return s, limits, nil
	case bucket != "":
		awsCfg, err := config.LoadDefaultConfig(context.Background())
		if err != nil {
			return nil, limits, errors.New(contract.EnvSnapshotBucket + ": the AWS configuration: " + err.Error())
		}
		if awsCfg.Region == "" {
			return nil, limits, errors.New(contract.EnvSnapshotBucket + " needs AWS_REGION")
		}
		// An endpoint of its own (aws-local's stand-in) is addressed by
		// path: its name resolves, the bucket's subdomain would not.
		pathStyle := firstSet(getenv, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") != ""
		client := s3.NewFromConfig(awsCfg, func(o *s3.Options) { o.UsePathStyle = pathStyle })
		return snapshot.NewS3Store(client, bucket), limits, nil
	}
	return nil, limits, nil
}
