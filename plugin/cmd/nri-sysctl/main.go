// Command nri-sysctl is a containerd NRI plugin that gives every pod the
// node's default namespaced sysctls.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
)

// version is set by the Makefile.
var version = "dev"

// The containerd the plugin and audit talk to unless told otherwise.
const (
	defaultContainerdAddress   = "/run/containerd/containerd.sock"
	defaultContainerdNamespace = "k8s.io"
)

// command is one way to run the binary. The usage text is made from the
// table below, so it lists every command and flag there is.
type command struct {
	name string // "" runs the plugin
	// args names the positional arguments in the usage line.
	args string
	// synopsis says what it does; details, if any, is printed under its
	// own usage.
	synopsis, details string
	// flags declares the command's flags and returns what runs it once
	// they are parsed, with the positional arguments.
	flags func(fs *flag.FlagSet) (run func(args []string, stdout, stderr io.Writer) int)
}

// commands in the order the usage lists them.
var commands = []command{
	{name: "", synopsis: "run the plugin", flags: pluginFlags},
	{name: "validate", synopsis: "check a config; exit 0 if valid, 1 with every problem", flags: validateFlags},
	{
		name: "import-crio", args: "PATH",
		synopsis: "print a config with the default_sysctls of a CRI-O config; exit 1 if some were left out (as comments)",
		details:  "Prints an nri-sysctl config with the [crio.runtime] default_sysctls of a CRI-O\nconfig (crio.conf or a crio.conf.d drop-in). Entries nri-sysctl would refuse\nare printed as comments with the reason, and the exit code is then 1.",
		flags:    importCRIOFlags,
	},
	{
		name:     "export-kubelet",
		synopsis: "print the node-wide defaults as a KubeletConfiguration drop-in (defaultPodSysctls); what kubelet cannot express as comments",
		details:  "Prints a KubeletConfiguration drop-in for kubelet's --config-dir (a .conf file):\nthe feature gate DefaultPodSysctls and the config's node-wide defaults as\ndefaultPodSysctls, inherited values read from this host now. Rules, exclusions,\nprofiles, user-namespace handling and keys kubelet refuses are listed as\ncomments with the reason. The config is checked as validate checks it; a bad\none exits 1 with every problem.",
		flags:    exportKubeletFlags,
	},
	{name: "explain", synopsis: "what a pod with these attributes gets, key by key, and why", flags: explainFlags},
	{name: "audit", synopsis: "which running containers lack the node's defaults; exit 1 if any", flags: auditFlags},
	{name: "version", synopsis: "print the version", flags: func(*flag.FlagSet) func([]string, io.Writer, io.Writer) int {
		return func(_ []string, stdout, _ io.Writer) int {
			fmt.Fprintf(stdout, "nri-sysctl %s\n", version)
			return 0
		}
	}},
}

func main() {
	// The user namespace probe re-executes this binary as its helper.
	if probe.IsHelper(os.Args) {
		os.Exit(probe.RunHelper(os.Args))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run finds the command args name (none: run the plugin), parses its
// flags and runs it. -h and --help print its usage and exit 0; a bad flag
// exits 2.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := commands[0]
	if len(args) > 0 {
		for _, c := range commands[1:] {
			if c.name == args[0] {
				cmd, args = c, args[1:]
				break
			}
		}
	}
	fs := flag.NewFlagSet(strings.TrimSpace("nri-sysctl "+cmd.name), flag.ContinueOnError)
	fs.SetOutput(stderr)
	runCmd := cmd.flags(fs)
	fs.Usage = func() { printCommandUsage(stderr, cmd, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	return runCmd(fs.Args(), stdout, stderr)
}

// usageLine is how a command is called.
func usageLine(c command) string {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.flags(fs)
	flags := ""
	if hasFlags(fs) {
		flags = "[flags]"
	}
	return strings.Join(strings.Fields("nri-sysctl "+c.name+" "+flags+" "+c.args), " ")
}

// printCommandUsage is the help of one command: for the plugin itself,
// the whole usage; for a subcommand, its own.
func printCommandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	if c.name == "" {
		printUsage(w)
		return
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", usageLine(c), cmp.Or(c.details, c.synopsis))
	if hasFlags(fs) {
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, fs)
	}
}

// printUsage lists every command, then each one's flags.
func printUsage(w io.Writer) {
	fmt.Fprint(w, "nri-sysctl: give every pod the node's default namespaced sysctls (containerd NRI plugin)\n\nUsage:\n")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", usageLine(c), c.synopsis)
	}
	tw.Flush()
	for _, c := range commands {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		if !hasFlags(fs) {
			continue
		}
		title := "Run flags"
		if c.name != "" {
			title = c.name + " flags"
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		printFlags(w, fs)
	}
}

// printFlags is flag's PrintDefaults with flags spelled --name, as the
// README and the other commands' messages spell them.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		switch def := f.DefValue; {
		case def == "" || def == "false" || def == "0" || def == "0s" || kind == "value":
		case kind == "string":
			usage += fmt.Sprintf(" (default %q)", def)
		default:
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}
