"""Where each worker runs and how the workers meet: devices, the rendezvous store, process
groups. The ground that training and launching stand on; it imports nothing of theirs."""
