// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

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

// command is one way to run the binary. The usage text, the exit-code
// table in docs/operating.md and the man page's list of commands are
// checked against the table below, so it lists every command, flag and
// exit code there is.
type command struct {
	name string // "" runs the plugin
	// args names the positional arguments in the usage line; run takes
	// exactly that many, for every command.
	args string
	// synopsis says what it does; details, if any, is printed under its
	// own usage.
	synopsis, details string
	// exits says what each exit code means, in order.
	exits []exit
	// flags declares the command's flags and returns what runs it once
	// they are parsed, with the positional arguments.
	flags func(fs *flag.FlagSet) (run func(args []string, stdout, stderr io.Writer) int)
}

// exit is one exit code of a command and what it means.
type exit struct {
	code int
	when string
}

// Every command exits 2 on a bad flag or argument, with its usage.
var usageExit = exit{2, "a bad flag, a missing or extra argument (the usage is printed)"}

// commands in the order the usage lists them.
var commands = []command{
	{
		name: "", synopsis: "run the plugin", flags: pluginFlags,
		exits: []exit{
			{0, "stopped by SIGTERM or SIGINT"},
			{1, "refused to start (a rejected config and no last good one, an untrusted file, a mode the runtime cannot take), or, pre-installed, the runtime's connection ended"},
			{2, "a bad flag or argument, or a bad --log-level, --log-format or --log-file (the usage is printed for a bad flag or argument)"},
		},
	},
	{
		name: "validate", synopsis: "check a config; exit 0 if valid, 1 with every problem", flags: validateFlags,
		exits: []exit{{0, "the config is valid"}, {1, "it is not: every problem is listed, each with file, line, key and reason"}, usageExit},
	},
	{
		name: "import-crio", args: "PATH",
		synopsis: "print a config with the default_sysctls of a CRI-O config; exit 1 if some were left out (as comments)",
		details:  "Prints an nri-sysctl config with the [crio.runtime] default_sysctls of a CRI-O\nconfig (crio.conf or a crio.conf.d drop-in). Entries nri-sysctl would refuse\nare printed as comments with the reason, and the exit code is then 1.",
		flags:    importCRIOFlags,
		exits:    []exit{{0, "every entry was imported"}, {1, "some entries were left out (printed as comments with the reason), or PATH cannot be read or parsed"}, usageExit},
	},
	{
		name:     "export-kubelet",
		synopsis: "print the node-wide defaults as a KubeletConfiguration drop-in (defaultPodSysctls); what kubelet cannot express as comments",
		details:  "Prints a KubeletConfiguration drop-in for kubelet's --config-dir (a .conf file):\nthe feature gate DefaultPodSysctls and the config's node-wide defaults as\ndefaultPodSysctls, inherited values read from this host now. Rules, exclusions,\nprofiles, user-namespace handling and keys kubelet refuses are listed as\ncomments with the reason. The config is checked as validate checks it; a bad\none exits 1 with every problem.",
		flags:    exportKubeletFlags,
		exits:    []exit{{0, "the drop-in was printed"}, {1, "the config is not valid (validate's messages)"}, usageExit},
	},
	{
		name: "explain", synopsis: "what a pod with these attributes gets, key by key, and why", flags: explainFlags,
		exits: []exit{{0, "the explanation was printed"}, {1, "the config is not valid (validate's messages)"}, {2, "a bad flag or argument, or no --namespace (the usage is printed)"}},
	},
	{
		name: "audit", synopsis: "which running containers lack the node's defaults; exit 1 if any", flags: auditFlags,
		exits: []exit{
			{0, "every running container has the node's defaults"},
			{1, "some container lacks them (whatever else audit could not tell)"},
			{2, "audit cannot tell: a container it cannot judge (UNKNOWN), a bad config, containerd unreachable, or a bad flag or argument (the usage is printed for a bad flag or argument)"},
		},
	},
	{name: "version", synopsis: "print the version", flags: func(*flag.FlagSet) func([]string, io.Writer, io.Writer) int {
		return func(_ []string, stdout, _ io.Writer) int {
			fmt.Fprintf(stdout, "nri-sysctl %s\n", version)
			return 0
		}
	}, exits: []exit{{0, "the version was printed"}, usageExit}},
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
	if err := checkArgCount(cmd, fs.Args()); err != nil {
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return usageExit.code
	}
	return runCmd(fs.Args(), stdout, stderr)
}

// checkArgCount is the one rule for positional arguments: a command takes
// exactly those its usage line names.
func checkArgCount(c command, args []string) error {
	names := strings.Fields(c.args)
	switch {
	case len(args) > len(names):
		return fmt.Errorf("unexpected argument %q", args[len(names)])
	case len(args) < len(names):
		return fmt.Errorf("missing %s", strings.Join(names[len(args):], " "))
	}
	return nil
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

// exitCodeTable is every command's exit codes as a Markdown table: what
// docs/operating.md shows.
func exitCodeTable() string {
	var b strings.Builder
	b.WriteString("| command | exit | when |\n|---|---|---|\n")
	for _, c := range commands {
		for _, e := range c.exits {
			fmt.Fprintf(&b, "| `%s` | %d | %s |\n", strings.TrimSpace("nri-sysctl "+c.name), e.code, e.when)
		}
	}
	return b.String()
}
