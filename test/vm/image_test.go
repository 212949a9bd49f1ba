// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package vm

// Building the node image the way an image builder would: Debian 12 from
// mmdebstrap, then containerd, kubelet and crictl binaries, nri-sysctl from
// its .deb (`make packages`, amd64 deb only) installed with `dpkg -i` in a
// chroot of the image's root, the containerd drop-ins, units and static
// pods, and an ext4 disk image made with `mke2fs -d` (no loop mount). A
// second .deb, at a newer version and with a changed shipped config, goes
// into the image for the upgrade test (vm_test.go).
//
// Everything is cached below $NRI_SYSCTL_CACHE/vm (default
// /var/cache/nri-sysctl-e2e/vm), keyed by what went into it:
//   base-<key>.tar              mmdebstrap's output; key: its arguments
//   node-<containerd>-<key>/    root.img, vmlinuz, initrd.img; key: the base
//                               key, the .deb and every file added on top
//                               (binaries included), so a new plugin binary or unit
//                               makes a new image and an unchanged tree
//                               reuses the old one. Older node images of the
//                               same containerd version are removed.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/test/internal/ociimage"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

// basePackages are installed by mmdebstrap (variant minbase).
var basePackages = []string{
	"systemd", "systemd-sysv", "linux-image-cloud-amd64", "initramfs-tools", "udev",
	"iproute2", "kmod", "runc", "containernetworking-plugins", "busybox-static", "procps",
}

const (
	debianSuite = "bookworm"
	imageSize   = "4G" // sparse; kubelet's eviction thresholds want free space
)

type nodeImage struct {
	containerd string // version, e.g. v2.4.2
	dir        string
	root       string // raw ext4 image, used read-only as a qcow2 backing file
	kernel     string
	initrd     string
}

var (
	imagesMu sync.Mutex
	images   = map[string]*nodeImage{}
)

// getNodeImage returns the node image for a containerd version, building it
// when the cache has none for the current inputs.
func getNodeImage(t *testing.T, containerdVersion string) *nodeImage {
	t.Helper()
	imagesMu.Lock()
	defer imagesMu.Unlock()
	if img := images[containerdVersion]; img != nil {
		return img
	}
	start := time.Now()
	img, err := buildNodeImage(t, containerdVersion)
	if err != nil {
		t.Fatalf("node image (containerd %s): %v", containerdVersion, err)
	}
	t.Logf("node image for containerd %s ready in %s: %s", containerdVersion, time.Since(start).Round(time.Second), img.dir)
	images[containerdVersion] = img
	return img
}

func cacheDir() string {
	if d := os.Getenv("NRI_SYSCTL_CACHE"); d != "" {
		return d
	}
	return "/var/cache/nri-sysctl-e2e"
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

func run(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	// Nothing outlives a killed test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, lastLines(string(out), 30))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// baseTar runs mmdebstrap once per package list.
func baseTar(t *testing.T, vmCache string) (path, key string, err error) {
	args := []string{"--variant=minbase", "--include=" + strings.Join(basePackages, ","), debianSuite}
	key = shortHash(append([]string{"mmdebstrap"}, args...)...)
	path = filepath.Join(vmCache, "base-"+key+".tar")
	if _, err := os.Stat(path); err == nil {
		t.Logf("base system: reusing %s", path)
		return path, key, nil
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", "", fmt.Errorf("mmdebstrap not found: run test/vm/setup.sh")
	}
	tmp := filepath.Join(vmCache, tempPrefix("base")+key+".tar")
	defer os.Remove(tmp)
	start := time.Now()
	t.Logf("base system: mmdebstrap %s (Debian packages, a minute or two)", strings.Join(args, " "))
	if err := run("/", "mmdebstrap", append(args, tmp)...); err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", "", err
	}
	t.Logf("base system: %s in %s", path, time.Since(start).Round(time.Second))
	return path, key, nil
}

// Temporary files and directories in the cache are named
// .tmp-<pid>-<what>-..., so that a later run removes what a killed run left.
func tempPrefix(what string) string { return fmt.Sprintf(".tmp-%d-%s-", os.Getpid(), what) }

func removeStaleTemps(t *testing.T, vmCache string) {
	paths, _ := filepath.Glob(filepath.Join(vmCache, ".tmp-*"))
	for _, p := range paths {
		f := strings.SplitN(filepath.Base(p), "-", 3)
		pid, err := strconv.Atoi(f[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || err == syscall.EPERM {
			continue // its run is still going
		}
		t.Logf("removing %s, left by an interrupted run (pid %d)", p, pid)
		os.RemoveAll(p)
	}
}

func buildNodeImage(t *testing.T, version string) (*nodeImage, error) {
	repo := repoRoot(t)
	cache := cacheDir()
	vmCache := filepath.Join(cache, "vm")
	if err := os.MkdirAll(vmCache, 0o755); err != nil {
		return nil, err
	}
	removeStaleTemps(t, vmCache)
	base, baseKey, err := baseTar(t, vmCache)
	if err != nil {
		return nil, err
	}

	// Everything that goes on top of the base system is laid out in a
	// staging tree first; its content is the cache key.
	staging, err := os.MkdirTemp(vmCache, tempPrefix("staging"))
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	// `cp -a staging/. root/` gives the image's / this directory's mode.
	if err := os.Chmod(staging, 0o755); err != nil {
		return nil, err
	}
	pkgs, err := getPackages(t, repo, vmCache)
	if err != nil {
		return nil, err
	}
	if err := copyFile(pkgs.upgrade, filepath.Join(staging, upgradeDebInImage), 0o644); err != nil {
		return nil, err
	}
	if err := copyTree(filepath.Join(repo, "test", "vm", "rootfs"), staging); err != nil {
		return nil, err
	}
	bins := map[string]string{
		filepath.Join(cache, "containerd-"+version, "bin", "containerd"):              "usr/local/bin/containerd",
		filepath.Join(cache, "containerd-"+version, "bin", "containerd-shim-runc-v2"): "usr/local/bin/containerd-shim-runc-v2",
		filepath.Join(cache, "containerd-"+version, "bin", "ctr"):                     "usr/local/bin/ctr",
		filepath.Join(cache, "crictl-"+crictlVersion, "bin", "crictl"):                "usr/local/bin/crictl",
		filepath.Join(cache, "kubernetes-"+kubeletVersion, "bin", "kubelet"):          "usr/local/bin/kubelet",
		filepath.Join(cache, "runc-"+usernsRuncVersion+"-seccomp", "bin", "runc"):     "usr/local/lib/vmtest/runc-userns/runc",
	}
	for src, dst := range bins {
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("%s is missing: run `test/vm/setup.sh %s` (make vm-test does)", src, version)
		}
		if err := copyFile(src, filepath.Join(staging, dst), 0o755); err != nil {
			return nil, err
		}
	}
	cfgVersion := containerdversion.ConfigVersion(version)
	dropIn := "10-nri.toml"
	if cfgVersion >= 4 {
		dropIn = "10-nri-v4.toml"
	}
	if err := writeFile(filepath.Join(staging, "etc/containerd/config.toml"), containerdConfig(version, cfgVersion), 0o644); err != nil {
		return nil, err
	}
	for _, cfg := range []string{"usr/local/lib/vmtest/node-config.yaml", "usr/local/lib/vmtest/compare-config.yaml"} {
		if err := run("/", pkgs.binary, "validate", "--skip-kernel-check", "--config", filepath.Join(staging, cfg)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(staging, "usr/local/share/vmtest"), 0o755); err != nil {
		return nil, err
	}
	if err := ociimage.WriteArchive(filepath.Join(staging, "usr/local/share/vmtest/images.tar"), ociimage.TestImages); err != nil {
		return nil, err
	}
	treeKey, err := hashTree(staging)
	if err != nil {
		return nil, err
	}
	debKey, err := hashTree(pkgs.deb)
	if err != nil {
		return nil, err
	}
	key := shortHash(baseKey, treeKey, debKey, version)
	img := &nodeImage{containerd: version, dir: filepath.Join(vmCache, "node-"+version+"-"+key)}
	img.root = filepath.Join(img.dir, "root.img")
	img.kernel = filepath.Join(img.dir, "vmlinuz")
	img.initrd = filepath.Join(img.dir, "initrd.img")
	if _, err := os.Stat(img.root); err == nil {
		t.Logf("node image: reusing %s", img.dir)
		now := time.Now()
		_ = os.Chtimes(img.dir, now, now) // recently used: kept by pruneImages
		return img, nil
	}

	start := time.Now()
	tmp, err := os.MkdirTemp(vmCache, tempPrefix("build"))
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	if err := run("/", "tar", "-C", root, "--numeric-owner", "-xpf", base); err != nil {
		return nil, err
	}
	if err := run("/", "cp", "-a", staging+"/.", root+"/"); err != nil {
		return nil, err
	}
	if err := installDeb(t, root, pkgs.deb); err != nil {
		return nil, err
	}
	// The NRI drop-in as the package ships it.
	if err := copyFile(filepath.Join(root, "usr/share/nri-sysctl/containerd", dropIn), filepath.Join(root, "etc/containerd/conf.d", dropIn), 0o644); err != nil {
		return nil, err
	}
	// The test's plugin config replaces the shipped example: for dpkg, a
	// conffile the admin edited.
	if err := copyFile(filepath.Join(root, "usr/local/lib/vmtest/node-config.yaml"), filepath.Join(root, "etc/nri-sysctl/config.yaml"), 0o600); err != nil {
		return nil, err
	}
	// The rest enabled as an image builder enables them, from their
	// [Install] sections (the package's postinst enabled its own units).
	if err := run("/", "systemctl", "--root="+root, "enable",
		"containerd.service", "vmtest-images.service", "vmtest-setup.service", "vmtest-agent.service",
		"kubelet.service"); err != nil {
		return nil, err
	}
	// No login prompt fights the agent for anything, and no getty on the console.
	_ = os.Remove(filepath.Join(root, "etc/systemd/system/getty.target.wants/getty@tty1.service"))
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	initrds, _ := filepath.Glob(filepath.Join(root, "boot", "initrd.img-*"))
	if len(kernels) != 1 || len(initrds) != 1 {
		return nil, fmt.Errorf("want one kernel and one initrd in the base system, found %v %v", kernels, initrds)
	}
	out := filepath.Join(tmp, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(kernels[0], filepath.Join(out, "vmlinuz"), 0o644); err != nil {
		return nil, err
	}
	if err := copyFile(initrds[0], filepath.Join(out, "initrd.img"), 0o644); err != nil {
		return nil, err
	}
	if err := run("/", "mke2fs", "-q", "-F", "-t", "ext4", "-L", "vmroot", "-d", root, filepath.Join(out, "root.img"), imageSize); err != nil {
		return nil, err
	}
	inputs := fmt.Sprintf("containerd %s\nbase %s (%s)\ntree %s\nbuilt %s in %s\n", version, base, baseKey, treeKey, time.Now().Format(time.RFC3339), time.Since(start).Round(time.Second))
	if err := writeFile(filepath.Join(out, "inputs.txt"), inputs, 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(out, img.dir); err != nil {
		// Another run (another checkout of the same tree) got there first.
		if _, serr := os.Stat(img.root); serr == nil {
			t.Logf("node image: %s was built meanwhile by another run", img.dir)
			return img, nil
		}
		return nil, err
	}
	pruneImages(t, vmCache, version, img.dir)
	t.Logf("node image: built %s in %s", img.dir, time.Since(start).Round(time.Second))
	return img, nil
}

// upgradeDebInImage is where the image keeps the newer package for the
// upgrade test.
const upgradeDebInImage = "usr/local/share/vmtest/nri-sysctl-upgrade.deb"

// upgradeMarker is the line the newer package adds to its shipped config,
// so that dpkg sees a conffile changed both by the admin and by the package.
const upgradeMarker = "# nri-sysctl VM test: the newer package's shipped config"

type packages struct {
	dir     string // temporary, removed by the caller
	deb     string // at the project's VERSION
	upgrade string // at upgradeVersion, with upgradeMarker in its config
	binary  string // the amd64 binary in deb
}

// projectVersion is the file VERSION.
func projectVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// upgradeVersion is a version dpkg orders after the project's: the same
// code, with build metadata added.
func upgradeVersion(t *testing.T) string {
	v := projectVersion(t)
	if strings.Contains(v, "+") {
		return v + ".vmtest.upgrade"
	}
	return v + "+vmtest.upgrade"
}

var (
	builtPackages    *packages
	builtPackagesErr error
)

// getPackages builds the packages once per test binary (imagesMu is held);
// TestMain removes them.
func getPackages(t *testing.T, repo, vmCache string) (*packages, error) {
	if builtPackages == nil && builtPackagesErr == nil {
		builtPackages, builtPackagesErr = buildPackages(t, repo, vmCache)
	}
	return builtPackages, builtPackagesErr
}

// removePackages removes what getPackages built.
func removePackages() {
	if builtPackages != nil {
		os.RemoveAll(builtPackages.dir)
	}
}

// buildPackages runs `make packages` for amd64 .deb twice: at the project's
// VERSION, and at upgradeVersion with a changed shipped config.
func buildPackages(t *testing.T, repo, vmCache string) (*packages, error) {
	start := time.Now()
	dir, err := os.MkdirTemp(vmCache, tempPrefix("packages"))
	if err != nil {
		return nil, err
	}
	p := &packages{dir: dir, binary: filepath.Join(dir, "bin-current", "amd64", "nri-sysctl")}
	cfg, err := os.ReadFile(filepath.Join(repo, "config", "config.yaml"))
	if err != nil {
		return nil, err
	}
	newerConfig := filepath.Join(dir, "config-upgrade.yaml")
	if err := writeFile(newerConfig, upgradeMarker+"\n"+string(cfg), 0o600); err != nil {
		return nil, err
	}
	for _, b := range []struct {
		name  string
		extra []string
		out   *string
	}{
		{"current", nil, &p.deb},
		{"upgrade", []string{"VERSION=" + upgradeVersion(t), "PACKAGE_CONFIG=" + newerConfig}, &p.upgrade},
	} {
		out := filepath.Join(dir, "packages-"+b.name)
		args := append([]string{"--no-print-directory", "packages", "PACKAGE_ARCHES=amd64", "PACKAGE_FORMATS=deb",
			"PACKAGES_DIR=" + out, "PACKAGE_BIN_DIR=" + filepath.Join(dir, "bin-"+b.name)}, b.extra...)
		if err := run(repo, "make", args...); err != nil {
			return nil, err
		}
		debs, _ := filepath.Glob(filepath.Join(out, "*.deb"))
		if len(debs) != 1 {
			return nil, fmt.Errorf("make packages (%s) wrote %v, want one .deb", b.name, debs)
		}
		*b.out = debs[0]
	}
	t.Logf("packages: %s and %s built in %s", filepath.Base(p.deb), filepath.Base(p.upgrade), time.Since(start).Round(time.Second))
	return p, nil
}

// installDeb installs the package into the image's root as an image
// builder does: dpkg -i in a chroot, where no systemd runs, so the
// postinst validates the config and enables the units (deb-systemd-helper)
// but starts nothing. The enablement links are checked here: kubelet's
// requirement on the plugin is the package's to create.
func installDeb(t *testing.T, root, deb string) error {
	start := time.Now()
	inRoot := "/tmp/" + filepath.Base(deb)
	if err := copyFile(deb, filepath.Join(root, inRoot), 0o644); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(root, inRoot))
	cmd := exec.Command("chroot", root, "dpkg", "-i", inRoot)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("chroot %s dpkg -i %s: %w\n%s", root, inRoot, err, out)
	}
	for _, link := range []string{
		"etc/systemd/system/multi-user.target.wants/nri-sysctl.service",
		"etc/systemd/system/kubelet.service.requires/nri-sysctl.service",
		"etc/systemd/system/multi-user.target.wants/nri-sysctl-reload.path",
	} {
		target, err := os.Readlink(filepath.Join(root, link))
		if err != nil {
			return fmt.Errorf("after dpkg -i in the chroot, no link /%s: %w\n%s", link, err, out)
		}
		if !strings.HasPrefix(target, "/lib/systemd/system/") {
			return fmt.Errorf("after dpkg -i in the chroot, /%s points to %s, want /lib/systemd/system\n%s", link, target, out)
		}
	}
	t.Logf("dpkg -i %s in the image's chroot: %s\n%s", filepath.Base(deb), time.Since(start).Round(time.Second), strings.TrimSpace(string(out)))
	return nil
}

// keepImages node images of one containerd version stay in the cache: the
// newest (by last use), so that runs from other checkouts at other commits
// keep theirs. An image used in the last 10 minutes is never removed: a VM
// may be about to boot from it.
const keepImages = 3

func pruneImages(t *testing.T, vmCache, version, current string) {
	dirs, _ := filepath.Glob(filepath.Join(vmCache, "node-"+version+"-*"))
	type image struct {
		dir  string
		used time.Time
	}
	var others []image
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && d != current {
			others = append(others, image{d, fi.ModTime()})
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i].used.After(others[j].used) })
	for i, o := range others {
		if i < keepImages-1 || time.Since(o.used) < 10*time.Minute {
			continue
		}
		t.Logf("node image: removing %s, last used %s", o.dir, o.used.Format(time.RFC3339))
		os.RemoveAll(o.dir)
	}
}

// vmPluginRequestTimeout is containerd's plugin_request_timeout in the
// image (containerdConfig), which TestVMPreinstalled checks.
const vmPluginRequestTimeout = "10s"

// containerdConfig is the node's /etc/containerd/config.toml: the settings
// any node needs, with NRI left to the drop-ins in conf.d.
func containerdConfig(version string, cfgVersion int) string {
	return fmt.Sprintf(`# containerd %s on the nri-sysctl VM test's node image.
version = %d
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.cri.v1.images".pinned_images]
  # The offline pause image (vmtest-images.service imports it).
  sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  # As on the test hosts (runtime-notes): runc never lowers oom_score_adj.
  restrict_oom_score_adj = true

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  # kubelet uses the systemd cgroup driver (cgroup v2 guest).
  SystemdCgroup = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"

[plugins."io.containerd.nri.v1.nri"]
  # The guest runs under TCG, many times slower than hardware: with four
  # pods starting at once, one answer once came later than the 2 s
  # default, and containerd dropped (and killed) the pre-installed plugin.
  # The drop-ins in conf.d merge over this; none of them sets it.
  plugin_request_timeout = %q
`, version, cfgVersion, ociimage.PauseImage, vmPluginRequestTimeout)
}

func writeFile(path, text string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// copyTree copies the repository's image files: directories 0755, files
// 0755 when executable in git, else 0644, all owned by root.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if info.Mode()&0o100 != 0 {
			mode = 0o755
		}
		return copyFile(path, target, mode)
	})
}

// hashTree hashes every path, mode, link target and file content below dir.
func hashTree(dir string) (string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, path)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		info, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s %o\n", rel, info.Mode())
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			fmt.Fprintf(h, "-> %s\n", l)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return "", err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
