// Package release builds the release as a version tag would, without
// publishing: GoReleaser (the version the Makefile pins, in bin/tools) runs
// .goreleaser.yaml in snapshot mode into a temporary directory, skipping
// the images, SBOMs and signatures (they need docker and syft, which the
// release workflow installs), and the test runs the binary built for this
// machine. The package has no runtime code and must not be imported; it
// imports none of the service's packages.
package release
