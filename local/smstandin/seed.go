package smstandin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// Seeding: the operator names, for each secret the template defines, where
// its value comes from (NAME=file:PATH or NAME=env:VARIABLE); Seed reads
// them all and puts each as the secret's new AWSCURRENT version.

// MaxSeedFile bounds a seed file: AWS's secret size.
const MaxSeedFile = MaxSecretSize

// SeedSpec is one parsed NAME=SOURCE:REF.
type SeedSpec struct {
	Secret string // the secret's name
	Source string // "file" or "env"
	Ref    string // the path or the variable
}

func (sp SeedSpec) String() string { return sp.Secret + "=" + sp.Source + ":" + sp.Ref }

// ParseSeedSpec parses NAME=file:PATH or NAME=env:VARIABLE, such as
// "galley/main/anthropic=env:ANTHROPIC_API_KEY".
func ParseSeedSpec(spec string) (SeedSpec, error) {
	name, src, ok := strings.Cut(spec, "=")
	if !ok {
		return SeedSpec{}, fmt.Errorf("smstandin: seed %q is not NAME=file:PATH or NAME=env:VARIABLE", spec)
	}
	if !validName(name) {
		return SeedSpec{}, fmt.Errorf("smstandin: seed %q: %q is not a valid secret name", spec, name)
	}
	kind, ref, _ := strings.Cut(src, ":")
	sp := SeedSpec{Secret: name, Source: kind, Ref: ref}
	switch {
	case kind != "file" && kind != "env":
		return SeedSpec{}, fmt.Errorf("smstandin: seed %q: the source must be file:PATH or env:VARIABLE", spec)
	case ref == "":
		return SeedSpec{}, fmt.Errorf("smstandin: seed %q names no %s", spec, map[string]string{"file": "path", "env": "variable"}[kind])
	}
	return sp, nil
}

// ParseSeedSpecs parses every spec.
func ParseSeedSpecs(specs []string) ([]SeedSpec, error) {
	out := make([]SeedSpec, 0, len(specs))
	for _, spec := range specs {
		sp, err := ParseSeedSpec(spec)
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, nil
}

// read reads the spec's value. Errors name the secret and the source,
// never the value.
func (sp SeedSpec) read() (string, error) {
	var (
		v   string
		err error
	)
	switch sp.Source {
	case "env":
		var ok bool
		if v, ok = os.LookupEnv(sp.Ref); !ok {
			err = errors.New("the variable is not set")
		}
	case "file":
		v, err = readSeedFile(sp.Ref)
	default:
		err = errors.New("unknown source")
	}
	if err == nil {
		v = strings.TrimRight(v, "\r\n")
		if v == "" {
			err = errors.New("the value is empty")
		}
	}
	if err != nil {
		return "", fmt.Errorf("smstandin: seed secret %s from %s:%s: %w", sp.Secret, sp.Source, sp.Ref, err)
	}
	return v, nil
}

// readSeedFile reads a regular file, not a symbolic link, only its owner
// may read or write, of at most MaxSeedFile bytes.
func readSeedFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", errors.New("the file is a symbolic link")
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", pe.Err // the message already names the path
		}
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return "", err
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("the file is open to others (mode %v): chmod 600", fi.Mode().Perm())
	case fi.Size() > MaxSeedFile:
		return "", fmt.Errorf("the file is larger than %d bytes", MaxSeedFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSeedFile+1))
	if err != nil {
		return "", errors.New("cannot read the file")
	}
	if len(b) > MaxSeedFile {
		return "", fmt.Errorf("the file is larger than %d bytes", MaxSeedFile)
	}
	return string(b), nil
}

// Seed reads every spec's value and puts each as a new AWSCURRENT version
// of its secret, which must exist already (the template defines it): a
// misspelt name fails rather than make a secret nothing reads. Nothing is
// put unless every value could be read.
func (s *Server) Seed(specs ...SeedSpec) error {
	values := make([]string, len(specs))
	for i, sp := range specs {
		if _, ok := s.ARN(sp.Secret); !ok {
			return fmt.Errorf("smstandin: seed secret %s from %s:%s: no such secret (the template defines %s)",
				sp.Secret, sp.Source, sp.Ref, strings.Join(s.Names(), ", "))
		}
		v, err := sp.read()
		if err != nil {
			return err
		}
		values[i] = v
	}
	for i, sp := range specs {
		if _, err := s.Put(sp.Secret, values[i]); err != nil {
			return fmt.Errorf("smstandin: seed secret %s from %s:%s: %w", sp.Secret, sp.Source, sp.Ref, err)
		}
	}
	return nil
}
