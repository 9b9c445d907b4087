from llmrelay.cli import main

main()
