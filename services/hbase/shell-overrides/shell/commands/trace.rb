# leakproof: the 2.4 shell's `trace` imports HTrace classes that HBase 2.6 removed, and the
# shell refuses to start when any command fails to load. This file is found on the class path
# before the one inside hbase-shell.jar and keeps the command, saying why it cannot trace.
module Shell
  module Commands
    class Trace < Command
      def help
        'HTrace tracing is not available: HBase 2.6 replaced it with OpenTelemetry.'
      end

      def command(*_args)
        raise ArgumentError, help
      end
    end
  end
end
