package ecsstandin

import (
	"maps"
	"slices"
)

// Image is what the stand-in runs for a container image, since it cannot
// run images: the image config's Entrypoint, Cmd, Env and WorkingDir, with
// host paths for its programs. A program named without a slash is looked
// up in the container's PATH, which comes from Env alone.
type Image struct {
	Entrypoint []string
	Cmd        []string
	Env        map[string]string
	WorkingDir string
}

// imageRule maps the image references it matches to an Image.
type imageRule struct {
	match func(ref string) bool
	img   Image
}

// WithImage makes the image reference ref run as img.
func WithImage(ref string, img Image) Option {
	return WithImageFunc(func(r string) bool { return r == ref }, img)
}

// WithImageFunc makes every image reference match accepts run as img (a
// CDK asset's ECR reference changes with its hash). A rule given later
// wins over an earlier one.
func WithImageFunc(match func(ref string) bool, img Image) Option {
	img = Image{Entrypoint: slices.Clone(img.Entrypoint), Cmd: slices.Clone(img.Cmd),
		Env: maps.Clone(img.Env), WorkingDir: img.WorkingDir}
	return func(s *Server) { s.images = append(s.images, imageRule{match: match, img: img}) }
}

// image returns the Image ref maps to.
func (s *Server) image(ref string) (Image, bool) {
	for _, r := range slices.Backward(s.images) {
		if r.match(ref) {
			return r.img, true
		}
	}
	return Image{}, false
}

// processArgs is Docker's rule for a container's process (the daemon's
// merge of a container's config with its image's): the definition's
// entryPoint replaces the image's and with it the image's Cmd; the command
// is the override's, else the definition's, else (only with the image's
// entrypoint) the image's Cmd.
func processArgs(img Image, c ContainerDefinition, override []string) []string {
	cmd := override
	if cmd == nil {
		cmd = c.Command
	}
	if len(c.EntryPoint) > 0 {
		return slices.Concat(c.EntryPoint, cmd)
	}
	if len(cmd) == 0 {
		cmd = img.Cmd
	}
	return slices.Concat(img.Entrypoint, cmd)
}
